"""PyTorch 1.13's side of `go run ./bench/predict -batch` and of its test
(Debian python3-torch, one thread).

    python3 torch_peer.py DIR

DIR/job.json says which model ("mlp" or "cnn": the built-in models of
compute/models.go), its parameters (names, shapes and offsets into
DIR/weights.bin, float32: ours, exported from a checkpoint), the images
(DIR/x.bin, float32 pixels in [0, 255], rows × C × H × W), the batch size
and the normalisation (mean, std of pixels scaled to [0, 1]).

The model is PyTorch's own modules with the names of ours, so that
load_state_dict(strict=True) checks that every parameter maps onto one of
the same shape. A batch is normalised, run through the model under
torch.no_grad(), softmaxed and argmaxed: what our predictor does to a
batch.

It prints "ready TORCH_VERSION", then answers one command a line on stdin:
  check  runs every image once, writes DIR/logits.bin and DIR/probs.bin
         (float32, rows × classes), prints "ok";
  round  times one pass over every image, prints its seconds of wall time
         and of processor time (time.process_time: the process's user and
         system time, which a busy machine's other work does not inflate).
It exits at the end of stdin.
"""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.fc1 = nn.Linear(shapes["fc1.weight"][1], shapes["fc1.weight"][0])
        self.fc2 = nn.Linear(shapes["fc2.weight"][1], shapes["fc2.weight"][0])
        self.fc3 = nn.Linear(shapes["fc3.weight"][1], shapes["fc3.weight"][0])

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        w1, w2 = shapes["conv1.weight"], shapes["conv2.weight"]
        self.conv1 = nn.Conv2d(w1[1], w1[0], w1[2], padding=w1[2] // 2)
        self.conv2 = nn.Conv2d(w2[1], w2[0], w2[2], padding=w2[2] // 2)
        self.fc1 = nn.Linear(shapes["fc1.weight"][1], shapes["fc1.weight"][0])
        self.fc2 = nn.Linear(shapes["fc2.weight"][1], shapes["fc2.weight"][0])

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        return self.fc2(x)


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    with open(os.path.join(d, "job.json")) as f:
        job = json.load(f)
    flat = np.fromfile(os.path.join(d, "weights.bin"), dtype=np.float32)
    shapes = {p["name"]: p["shape"] for p in job["params"]}
    state = {}
    for p in job["params"]:
        n = int(np.prod(p["shape"]))
        state[p["name"]] = torch.from_numpy(flat[p["offset"]:p["offset"] + n].reshape(p["shape"]).copy())
    model = {"mlp": MLP, "cnn": CNN}[job["model"]](shapes)
    model.load_state_dict(state, strict=True)
    model.eval()
    rows, bs = job["rows"], job["batch"]
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32).reshape([rows] + job["input"]))
    mean, std = job["mean"], job["std"]

    def batch(lo):
        xb = x[lo:lo + bs]
        logits = model((xb / 255 - mean) / std)
        probs = torch.softmax(logits, dim=1)
        return logits, probs, probs.argmax(dim=1)

    with torch.no_grad():
        batch(0)
        print("ready", torch.__version__, flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "check":
                outs = [batch(lo) for lo in range(0, rows, bs)]
                torch.cat([o[0] for o in outs]).numpy().astype(np.float32).tofile(os.path.join(d, "logits.bin"))
                torch.cat([o[1] for o in outs]).numpy().astype(np.float32).tofile(os.path.join(d, "probs.bin"))
                print("ok", flush=True)
            elif cmd == "round":
                start, cpu = time.perf_counter(), time.process_time()
                for lo in range(0, rows, bs):
                    batch(lo)
                print(time.perf_counter() - start, time.process_time() - cpu, flush=True)
            else:
                print("unknown command " + cmd, flush=True)


if __name__ == "__main__":
    main()

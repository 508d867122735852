"""PyTorch eager peer of bench/gpu's gpubench, on the same GPU, measured the
same way (PyTorch 2.11 on the GPU machine; any PyTorch with CUDA works):

  - gemm: TFLOP/s of torch.matmul at n^3 float32, with TF32 off (fp32) and on
    (tf32), median over trials of the mean over reps, after a warm-up;
  - train: samples/s over one epoch of Fashion-MNIST (batch 256, SGD lr 0.05
    momentum 0.9), the first --warmup steps untimed; the batch is gathered and
    normalised on the host, pinned and copied asynchronously, losses are
    summed on the device (no per-step sync), cudnn.benchmark on (static
    shapes: the strong, usual setting); then the test accuracy.

The models are tempotrain's mnist-cnn and mnist-resnet18: torchvision's
ResNet-18 with a 1-channel 7x7 stride-2 stem, as compute/models.go builds it.
Prints one JSON line per measurement (the fields of gpubench's Result).

    python3 peer.py --what gemm,cnn,resnet18 --data DIR
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # data.FashionMNISTMean/Std


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        b = f.read()
    nd = struct.unpack(">I", b[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return torch.frombuffer(bytearray(b[4 + 4 * nd:]), dtype=torch.uint8).reshape(dims)


def find(data_dir, base):
    for name in (base + ".gz", base):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise SystemExit("no %s in %s" % (base, data_dir))


def load(data_dir, split):
    x = read_idx(find(data_dir, split + "-images-idx3-ubyte"))
    y = read_idx(find(data_dir, split + "-labels-idx1-ubyte"))
    x = (x.float() / 255 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), y.long()


def model(name):
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "resnet18":
        import torchvision
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return m
    raise SystemExit("unknown model " + name)


def set_precision(prec):
    tf32 = prec == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def emit(r, dev):
    r.update(side="pytorch", device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu")
    print(json.dumps(r), flush=True)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def to(t, dev):
    if dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t


def gemm(a, prec, dev):
    set_precision(prec)
    n = a.gemm_n
    g = torch.Generator(device=dev).manual_seed(a.seed) if dev.type == "cuda" else torch.Generator().manual_seed(a.seed)
    x = torch.randn(n, n, device=dev, generator=g)
    y = torch.randn(n, n, device=dev, generator=g)
    z = torch.empty(n, n, device=dev)
    for _ in range(3):
        torch.matmul(x, y, out=z)
    sync(dev)
    times = []
    for _ in range(a.trials):
        t0 = time.perf_counter()
        for _ in range(a.gemm_reps):
            torch.matmul(x, y, out=z)
        sync(dev)
        times.append((time.perf_counter() - t0) / a.gemm_reps)
    sec = statistics.median(times)
    emit({"kind": "gemm", "precision": prec, "n": n, "seconds": sec, "tflops": 2 * n ** 3 / sec / 1e12}, dev)


def train(a, name, prec, dev, data):
    set_precision(prec)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.seed)
    xtr, ytr, xte, yte = data
    net = model(name).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    loss_sum = torch.zeros((), device=dev)
    timed, start = 0, None
    net.train()
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed + epoch)
        perm = torch.randperm(len(ytr), generator=g)
        for step, i in enumerate(range(0, len(perm), a.batch)):
            if epoch == 0 and step == a.warmup:
                sync(dev)
                start = time.perf_counter()
            b = perm[i:i + a.batch]
            x, y = to(xtr[b], dev), to(ytr[b], dev)
            out = net(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * len(b)
            if epoch > 0 or step >= a.warmup:
                timed += len(b)
    sync(dev)
    if start is None:
        raise SystemExit("train %s: an epoch of %d steps is not longer than --warmup %d" % (name, step + 1, a.warmup))
    elapsed = time.perf_counter() - start
    net.eval()
    correct = torch.zeros((), device=dev, dtype=torch.int64)
    with torch.no_grad():
        for i in range(0, len(yte), a.batch):
            x, y = to(xte[i:i + a.batch], dev), to(yte[i:i + a.batch], dev)
            correct += (net(x).argmax(1) == y).sum()
    emit({"kind": "train", "model": name, "precision": prec, "seconds": elapsed, "samples_per_s": timed / elapsed,
          "test_accuracy": correct.item() / len(yte), "train_loss": loss_sum.item() / (a.epochs * len(ytr))}, dev)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--what", default="gemm,cnn,resnet18")
    p.add_argument("--precisions", default="fp32,tf32")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--gemm-n", type=int, default=4096)
    p.add_argument("--gemm-reps", type=int, default=20)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--train-limit", type=int, default=0, help="use the first items only (smoke tests)")
    a = p.parse_args()
    dev = torch.device("cuda", a.gpu) if a.device == "cuda" else torch.device("cpu")
    data = None
    for w in a.what.split(","):
        for prec in a.precisions.split(","):
            if w == "gemm":
                gemm(a, prec, dev)
                continue
            if data is None:
                data = load(a.data, "train") + load(a.data, "t10k")
                if a.train_limit:
                    data = (data[0][:a.train_limit], data[1][:a.train_limit], data[2][:a.train_limit], data[3][:a.train_limit])
            train(a, w, prec, dev, data)


if __name__ == "__main__":
    main()

"""PyTorch DDP peer of bench/train: the same models, data, sharding and
hyper-parameters as tempotrain's mnist-mlp, mnist-cnn and mnist-resnet18, on gloo with one
compute thread per rank.

Run by bench/train (one process per rank):
    python3 ddp.py --model mlp --rank 0 --world 2 --port 29500 --data DIR
Prints one JSON line per epoch on rank 0.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.2860, 0.3530  # data.FashionMNISTMean/Std


def read_idx(path):
    if not os.path.exists(path) and path.endswith(".gz"):
        path = path[:-3]  # the file as it unpacks (bench/gpu/run.sh)
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        b = f.read()
    magic = struct.unpack(">I", b[:4])[0]
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def load(data_dir, split, limit):
    x = read_idx(os.path.join(data_dir, split + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, split + "-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = (torch.from_numpy(x.astype(np.float32)) / 255 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "resnet18":
        # compute's resnet18: torchvision's ResNet-18 with a 1-channel 7x7
        # stride-2 stem (Ray Train's Fashion-MNIST example; bench/gpu/peer.py).
        import torchvision
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return m
    raise SystemExit("unknown model " + name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank, world_size=a.world)
    xtr, ytr = load(a.data, "train", a.train_limit)
    xte, yte = load(a.data, "t10k", a.test_limit)
    net = DDP(model(a.model))
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    sampler = DistributedSampler(range(len(ytr)), num_replicas=a.world, rank=a.rank, shuffle=True, seed=a.seed)
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        dist.barrier()
        start, cpu0 = time.perf_counter(), time.process_time()
        loss_sum, correct, seen = 0.0, 0, 0
        net.train()
        for i in range(0, len(idx), a.batch):
            b = idx[i:i + a.batch]
            x, y = xtr[b], ytr[b]
            out = net(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(b)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(b)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
        net.eval()
        tc, ts = 0, 0
        with torch.no_grad():
            mine = torch.arange(a.rank, len(yte), a.world)
            for i in range(0, len(mine), a.batch):
                b = mine[i:i + a.batch]
                tc += (net(xte[b]).argmax(1) == yte[b]).sum().item()
                ts += len(b)
        t = torch.tensor([loss_sum, correct, seen, tc, ts, elapsed, cpu], dtype=torch.float64)
        dist.all_reduce(t)
        if a.rank == 0:
            print(json.dumps({"epoch": epoch + 1, "train_loss": t[0].item() / t[2].item(),
                              "train_accuracy": t[1].item() / t[2].item(), "test_accuracy": t[3].item() / t[4].item(),
                              "samples_per_s": t[2].item() / (t[5].item() / a.world),
                              "epoch_time_s": t[5].item() / a.world, "cpu_s": t[6].item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

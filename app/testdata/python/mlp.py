"""A deterministic data-parallel MLP on Fashion-MNIST for app's Python tests.

Seeds, deterministic algorithms and the sampler's epochs fix every step, so
a run restarted from a checkpoint (after an epoch, or mid-epoch after a
preemption) ends with the same parameters, bit for bit, as one never
interrupted. Config: epochs, samples, batch_size, seed, epoch_sleep (s),
final (a path where rank 0 writes the parameters' raw bytes), pids_dir
(each process writes its pid there), fail_rank/fail_epoch/fail_attempt
(an injected exception), gate_dir/gate_epoch (every rank of attempt 1
writes gate_dir/reached-<rank> at the start of gate_epoch and waits for
gate_dir/go: the test acts at a known point).
"""
import gzip
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import tempotrain.train as train
from tempotrain.train.torch import prepare_data_loader, prepare_model

DATA = "/usr/share/datasets/fashion-mnist"


def load(n):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return torch.tensor(x, dtype=torch.float32) / 255.0, torch.tensor(y, dtype=torch.long)


def train_func(config):
    ctx = train.get_context()
    rank = ctx.get_world_rank()
    if config.get("pids_dir"):
        open(os.path.join(config["pids_dir"], str(os.getpid())), "w").close()
    torch.manual_seed(config.get("seed", 0))
    torch.use_deterministic_algorithms(True)
    x, y = load(config.get("samples", 4096))
    loader = prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=config.get("batch_size", 64), shuffle=True))
    model = prepare_model(nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    net = getattr(model, "module", model)

    start_epoch, skip = 0, 0
    ck = train.get_checkpoint()
    if ck:
        with ck.as_directory() as d:
            st = torch.load(os.path.join(d, "state.pt"))
        net.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start_epoch, skip = st["epoch"], st["next_step"]

    def save(epoch, next_step):
        d = tempfile.mkdtemp()
        if rank == 0:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "next_step": next_step},
                       os.path.join(d, "state.pt"))
        return train.Checkpoint.from_directory(d) if rank == 0 else None

    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, config.get("epochs", 3)):
        gate = config.get("gate_dir")
        if gate and epoch == config.get("gate_epoch") and ctx.get_attempt() == 1:
            open(os.path.join(gate, "reached-%d" % rank), "w").close()
            while not os.path.exists(os.path.join(gate, "go")):
                time.sleep(0.02)
        loader.sampler.set_epoch(epoch)
        total, n = 0.0, 0
        for step, (xb, yb) in enumerate(loader):
            if step < skip:
                continue
            if (rank == config.get("fail_rank", -1) and epoch == config.get("fail_epoch", 0)
                    and ctx.get_attempt() == config.get("fail_attempt", 1)):
                raise RuntimeError("injected failure in rank %d, epoch %d" % (rank, epoch))
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + loss.item(), n + 1
            train.set_progress(epoch, step)
            train.add_samples(len(xb))
            if train.should_stop():
                train.report({"epoch": epoch, "step": step, "preempted": 1}, checkpoint=save(epoch, step + 1))
                return
        skip = 0
        time.sleep(config.get("epoch_sleep", 0))
        train.report({"epoch": epoch, "loss": total / max(n, 1)}, checkpoint=save(epoch + 1, 0))
    if rank == 0 and config.get("final"):
        with open(config["final"], "wb") as f:
            for t in net.state_dict().values():
                f.write(t.detach().cpu().numpy().tobytes())

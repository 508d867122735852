"""A PyTorch training function written for Ray Train, run by tempotrain.

Logistic regression on a generated two-class table, data-parallel over the
run's ranks: prepare_model wraps the model in DistributedDataParallel,
prepare_data_loader gives each rank its share of the rows. Every rank
reports each epoch (report is collective); rank 0 hands over the checkpoint.
A restarted or resumed run goes on from its last checkpoint.

Run by examples/python-pytorch/main.go on an in-process dev server, or
alone: python3 examples/python-pytorch/train.py (tempotrain's local mode).
"""
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from tempotrain import train  # was: import ray.train as train
from tempotrain.train.torch import prepare_data_loader, prepare_model


def make_data(n=512):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] + 2 * x[:, 1] > 0).float().unsqueeze(1)
    return x, y


def train_func(config):
    torch.manual_seed(1)
    x, y = make_data()
    loader = prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    model = prepare_model(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.5))
    net = getattr(model, "module", model)

    start = 0
    ckpt = train.get_checkpoint()  # the last committed checkpoint, on every rank
    if ckpt:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1

    for epoch in range(start, config.get("epochs", 5)):
        if hasattr(loader.sampler, "set_epoch"):  # a DistributedSampler: with more than one rank
            loader.sampler.set_epoch(epoch)
        train.set_progress(epoch, 0)
        total, correct, seen = 0.0, 0, 0
        for xb, yb in loader:
            opt.zero_grad()
            out = model(xb)
            loss = nn.functional.binary_cross_entropy_with_logits(out, yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            correct += ((out > 0).float() == yb).sum().item()
            seen += len(xb)
        train.add_samples(seen)
        checkpoint = None
        if train.get_context().get_world_rank() == 0:
            d = train.new_checkpoint_dir()  # committed by hard links, no copy
            torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, os.path.join(d, "state.pt"))
            checkpoint = train.Checkpoint.from_directory(d)
        train.report({"epoch": epoch, "loss": total / seen, "accuracy": correct / seen}, checkpoint=checkpoint)


if __name__ == "__main__":
    train_func({"epochs": 3})

"""ResNet-18 on Fashion-MNIST with tempotrain: Ray Train's introduction (seed 003)
with ``ray.train`` replaced by ``tempotrain.train``.

As a tempotrain run's function::

    "python": {"entrypoint": "train.py:train_func", "working_dir": "<this directory>"},
    "config": {"epochs": 2, "batch_size": 64}

As a script, in local mode (no Go rank), e.g. as the benchmark's torchrun peer::

    python3 -m torch.distributed.run --nproc_per_node 2 train.py --epochs 1

Config keys (defaults in DEFAULTS): epochs, batch_size (per rank), lr, num_samples
(the first n training images), test_samples, seed, deterministic (fixed seeds and
torch.use_deterministic_algorithms: two runs give byte-identical weights, resumed or
not), data_dir (the IDX .gz files), steps_per_report (0: once per epoch),
final_state_path (rank 0 saves the final state_dict there), step_log (each rank appends
"unix_time rank pid epoch step" to step_log.<rank> after every step: bench/torchrun times
both runtimes with it).

Threads: torch's default (OMP_NUM_THREADS, which a rank sets from its CPU count).
"""

import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader, TensorDataset

from tempotrain import train
from tempotrain.train import torch as tt

DEFAULTS = {
    "epochs": 2,
    "batch_size": 64,
    "lr": 0.01,
    "num_samples": 2048,
    "test_samples": 1000,
    "seed": 0,
    "deterministic": False,
    "data_dir": "/usr/share/datasets/fashion-mnist",
    "steps_per_report": 0,
    "final_state_path": None,
    "step_log": None,
}

# Fashion-MNIST's pixel mean and standard deviation (on [0, 1]).
MEAN, STD = 0.2860, 0.3530


def read_idx(path, limit=None):
    """An IDX file (gzip'd when its name ends in .gz) as a uint8 array, its first `limit` items only."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        head = f.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != 0x08:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes (magic {head.hex()})")
        ndim = head[3]
        dims = list(struct.unpack(f">{ndim}I", f.read(4 * ndim)))
        n = dims[0] if limit is None else min(limit, dims[0])
        item = int(np.prod(dims[1:], dtype=np.int64))
        raw = f.read(n * item)
    if len(raw) != n * item:
        raise ValueError(f"{path}: {len(raw)} bytes of data, want {n * item} for {n} items of {dims[1:]}")
    return np.frombuffer(raw, dtype=np.uint8).reshape([n] + dims[1:])


def load_split(data_dir, split, n):
    prefix = "train" if split == "train" else "t10k"
    def find(base):  # the .gz of the dataset's package, or the file as it unpacks
        p = os.path.join(data_dir, base + ".gz")
        return p if os.path.exists(p) else os.path.join(data_dir, base)

    try:
        x = read_idx(find(f"{prefix}-images-idx3-ubyte"), n)
        y = read_idx(find(f"{prefix}-labels-idx1-ubyte"), n)
    except FileNotFoundError as e:
        raise train.NonRetryableError(f"data_dir {data_dir!r}: {e}") from e
    x = torch.from_numpy(x.astype(np.float32) / 255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    return TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


def build_model():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
    return model


def unwrap(model):
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def sum_over_ranks(values):
    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "nccl":  # NCCL reduces GPU tensors only
            t = t.to(tt.get_device())
        dist.all_reduce(t)
    return t.cpu().tolist()


def save_checkpoint(model, opt, epoch, step):
    """Rank 0 writes the checkpoint (a directory) and returns it; other ranks None."""
    if train.get_context().get_world_rank() != 0:
        return None
    d = train.new_checkpoint_dir()
    torch.save(unwrap(model).state_dict(), os.path.join(d, "model.pt"))
    torch.save({"optimizer": opt.state_dict(), "epoch": epoch, "step": step}, os.path.join(d, "state.pt"))
    return train.Checkpoint.from_directory(d)


def evaluate(model, loader, criterion):
    model.eval()
    loss_sum, correct, total = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss_sum += criterion(out, y).item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    loss_sum, correct, total = sum_over_ranks([loss_sum, correct, total])
    return loss_sum / max(total, 1), correct / max(total, 1)


def train_func(config=None):
    cfg = dict(DEFAULTS)
    unknown = sorted(set(config or {}) - set(DEFAULTS))
    if unknown:
        raise train.NonRetryableError(f"config: unknown keys {unknown}; known: {sorted(DEFAULTS)}")
    cfg.update(config or {})
    seed = int(cfg["seed"])
    if cfg["deterministic"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    torch.manual_seed(seed)  # the same initial weights on every rank

    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    train_ds = load_split(cfg["data_dir"], "train", int(cfg["num_samples"]))
    test_ds = load_split(cfg["data_dir"], "test", int(cfg["test_samples"]))
    gen = torch.Generator()
    gen.manual_seed(seed)
    train_loader = tt.prepare_data_loader(
        DataLoader(train_ds, batch_size=int(cfg["batch_size"]), shuffle=True, generator=gen))
    test_loader = tt.prepare_data_loader(DataLoader(test_ds, batch_size=256))

    model = tt.prepare_model(build_model())
    opt = torch.optim.SGD(model.parameters(), lr=float(cfg["lr"]), momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    start_epoch, start_step = 0, 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        dev = tt.get_device()
        with ckpt.as_directory() as d:
            unwrap(model).load_state_dict(torch.load(os.path.join(d, "model.pt"), map_location=dev))
            st = torch.load(os.path.join(d, "state.pt"), map_location=dev)
        opt.load_state_dict(st["optimizer"])
        start_epoch, start_step = int(st["epoch"]), int(st["step"])
        if rank == 0:
            print(f"resuming at epoch {start_epoch}, step {start_step} from {ckpt.path}", flush=True)

    every = int(cfg["steps_per_report"] or 0)
    step_log = open(f"{cfg['step_log']}.{rank}", "a", buffering=1) if cfg["step_log"] else None
    for epoch in range(start_epoch, int(cfg["epochs"])):
        if hasattr(train_loader.sampler, "set_epoch"):
            train_loader.sampler.set_epoch(epoch)
        else:  # one rank: the loader's own RandomSampler draws from gen
            gen.manual_seed(seed + epoch)
        batches = iter(train_loader)
        step = 0
        if epoch == start_epoch:
            for _ in range(start_step):  # the same order as the interrupted attempt: skip its steps
                next(batches)
            step = start_step
        loss_sum, seen = 0.0, 0
        t0 = time.perf_counter()
        for x, y in batches:
            if train.should_stop():  # collective: every rank asks before every step
                lsum, n = sum_over_ranks([loss_sum, seen])
                train.report({"loss": lsum / max(n, 1), "epoch": epoch, "step": step},
                             checkpoint=save_checkpoint(model, opt, epoch, step))
                return
            loss = criterion(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.item() * len(y)
            seen += len(y)
            train.set_progress(epoch, step)
            train.add_samples(len(y))
            if step_log:
                step_log.write(f"{time.time():.6f} {rank} {os.getpid()} {epoch} {step}\n")
            if every and step % every == 0:
                train.report({"loss": loss_sum / seen, "epoch": epoch, "step": step})
        elapsed = time.perf_counter() - t0
        loss_sum, seen = sum_over_ranks([loss_sum, seen])
        test_loss, accuracy = evaluate(model, test_loader, criterion)
        metrics = {"loss": loss_sum / max(seen, 1), "accuracy": accuracy, "test_loss": test_loss,
                   "epoch": epoch, "samples_per_s": seen / elapsed if elapsed > 0 else 0.0,
                   "epoch_time_s": elapsed}
        train.report(metrics, checkpoint=save_checkpoint(model, opt, epoch + 1, 0))

    if cfg["final_state_path"] and rank == 0:
        torch.save(unwrap(model).state_dict(), cfg["final_state_path"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--num-samples", type=int, default=DEFAULTS["num_samples"])
    p.add_argument("--test-samples", type=int, default=DEFAULTS["test_samples"])
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--data-dir", default=DEFAULTS["data_dir"])
    p.add_argument("--steps-per-report", type=int, default=DEFAULTS["steps_per_report"])
    p.add_argument("--final-state-path", default=None)
    p.add_argument("--step-log", default=None)
    args = p.parse_args(argv)
    train_func(vars(args))
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

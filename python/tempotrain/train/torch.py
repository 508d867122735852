"""Ray Train's ray.train.torch helpers: prepare_model, prepare_data_loader, get_device.

The only module of the package that imports torch.
"""

import datetime
import os

import torch
import torch.distributed as dist

from . import _session

__all__ = ["get_device", "prepare_model", "prepare_data_loader", "backend", "init_process_group"]


def _context():
    return _session.get_session().context


def get_device():
    """This rank's device: its GPU when it has one and CUDA is there, else the CPU.

    With a Go rank the GPU is the context's device, found by its position in
    CUDA_VISIBLE_DEVICES (Go sets it to the rank's GPUs); in local mode it is
    cuda:LOCAL_RANK, as torchrun's."""
    ctx = _context()
    dev = ctx._device_index()
    if dev == -1 or not torch.cuda.is_available():
        return torch.device("cpu")
    n = torch.cuda.device_count()
    if dev == -2:  # local mode
        return torch.device("cuda", ctx.get_local_rank() % n)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if str(dev) in visible:
        return torch.device("cuda", visible.index(str(dev)))
    if n == 1:
        return torch.device("cuda", 0)
    return torch.device("cuda", ctx.get_local_rank() % n)


def backend():
    """The process group's backend: the Go rank's choice, else "nccl" on GPU and "gloo" on CPU."""
    b = _session.get_session().backend
    if b:
        return b
    return "nccl" if get_device().type == "cuda" else "gloo"


def init_process_group(timeout_s=None):
    """Initialises torch.distributed from the environment (init_method env://) when
    it is not yet; a no-op where torch.distributed is missing."""
    if not dist.is_available() or dist.is_initialized():
        return
    ctx = _context()
    dev = get_device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    kw = {}
    if timeout_s is None:
        raw = os.environ.get("TEMPOTRAIN_PG_TIMEOUT_S")
        timeout_s = float(raw) if raw else None
    if timeout_s is not None:
        kw["timeout"] = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend=backend(), init_method="env://",
                            rank=ctx.get_world_rank(), world_size=ctx.get_world_size(), **kw)


def prepare_model(model, move_to_device=True, parallel_strategy="ddp", parallel_strategy_kwargs=None):
    """Moves the model to the rank's device and, when the group has more than one
    rank, wraps it in DistributedDataParallel (initialising the process group first)."""
    if parallel_strategy not in ("ddp", None):
        raise ValueError(f"tempotrain.train.torch.prepare_model: parallel_strategy={parallel_strategy!r}: "
                         f"only \"ddp\" or None")
    dev = get_device()
    if move_to_device:
        model = model.to(dev)
    if parallel_strategy is None or _context().get_world_size() <= 1:
        return model
    init_process_group()
    kw = dict(parallel_strategy_kwargs or {})
    if dev.type == "cuda":
        kw.setdefault("device_ids", [dev.index])
        kw.setdefault("output_device", dev.index)
    return torch.nn.parallel.DistributedDataParallel(model, **kw)


def _move(batch, dev, non_blocking):
    if isinstance(batch, torch.Tensor):
        return batch.to(dev, non_blocking=non_blocking)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_move(b, dev, non_blocking) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_move(b, dev, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: _move(v, dev, non_blocking) for k, v in batch.items()}
    return batch


class _DeviceLoader:
    """Iterates a DataLoader with each batch moved to a device; sampler, len() and
    the loader's other attributes pass through."""

    def __init__(self, loader, device):
        self._loader = loader
        self._device = device
        self._non_blocking = device.type == "cuda" and bool(getattr(loader, "pin_memory", False))

    def __iter__(self):
        for batch in self._loader:
            yield _move(batch, self._device, self._non_blocking)

    def __len__(self):
        return len(self._loader)

    @property
    def sampler(self):
        return self._loader.sampler

    @property
    def dataset(self):
        return self._loader.dataset

    @property
    def batch_size(self):
        return self._loader.batch_size

    def __getattr__(self, name):
        return getattr(self._loader, name)


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True, auto_transfer=True):
    """Gives each rank its shard of the loader's data (a DistributedSampler that
    shuffles when the loader did) and moves batches to the rank's device.

    Call ``loader.sampler.set_epoch(epoch)`` each epoch for a new shuffle."""
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

    ctx = _context()
    loader = data_loader
    ws = ctx.get_world_size()
    if (add_dist_sampler and ws > 1 and not isinstance(loader.sampler, DistributedSampler)
            and not isinstance(loader.dataset, IterableDataset)):
        if loader.batch_size is None:
            raise ValueError("tempotrain.train.torch.prepare_data_loader: the loader has a custom batch_sampler "
                             "(batch_size None); give it a DistributedSampler yourself or pass add_dist_sampler=False")
        shuffle = isinstance(loader.sampler, RandomSampler)
        seed = 0
        gen = getattr(loader.sampler, "generator", None)
        if gen is not None:
            seed = gen.initial_seed()
        sampler = DistributedSampler(loader.dataset, num_replicas=ws, rank=ctx.get_world_rank(),
                                     shuffle=shuffle, seed=seed)
        kw = dict(
            batch_size=loader.batch_size,
            sampler=sampler,
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory,
            drop_last=loader.drop_last,
            timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn,
            generator=loader.generator,
            multiprocessing_context=loader.multiprocessing_context,
        )
        if loader.num_workers > 0:
            kw["prefetch_factor"] = loader.prefetch_factor
            kw["persistent_workers"] = loader.persistent_workers
        loader = DataLoader(loader.dataset, **kw)
    if move_to_device:  # auto_transfer (Ray's CUDA-stream prefetch) is accepted and ignored
        loader = _DeviceLoader(loader, get_device())
    return loader

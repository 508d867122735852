"""Rank 1 stops in its own code (a sleep, deaf to all) at step 3 while
rank 0 waits for it in torch's all-reduce."""
import time

import torch
import torch.distributed as dist

import tempotrain.train as train


def train_func(config):
    rank = train.get_context().get_world_rank()
    for step in range(100):
        train.set_progress(0, step)
        if rank == 1 and step == 3:
            time.sleep(3600)
        t = torch.ones(4)
        dist.all_reduce(t)
        time.sleep(0.05)

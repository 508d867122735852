"""Two ranks, each with its own fake Go rank, train with prepare_model and
prepare_data_loader over gloo: DDP averages the gradients and the ranks see
disjoint shards. Needs torch (Debian's python3-torch on this machine)."""

import os
import shutil
import socket
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakego import FakeGo  # noqa: E402

DDP_FUNC = """
import copy

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from tempotrain import train
from tempotrain.train import torch as tt


def train_func(config):
    ctx = train.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    assert dist.is_initialized(), "the runner initialises the process group before the function"
    assert dist.get_rank() == rank and dist.get_world_size() == size == 2, (dist.get_rank(), dist.get_world_size())
    assert tt.backend() == "gloo" and tt.get_device().type == "cpu"

    torch.manual_seed(100 + rank)  # different weights per rank: DDP must broadcast rank 0's
    n = config["n"]
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(7))
    ds = TensorDataset(x, torch.arange(n))
    loader = tt.prepare_data_loader(DataLoader(ds, batch_size=4, shuffle=True,
                                               generator=torch.Generator().manual_seed(5)))
    assert isinstance(loader.sampler, torch.utils.data.DistributedSampler), type(loader.sampler)
    assert loader.sampler.shuffle and loader.sampler.seed == 5, (loader.sampler.shuffle, loader.sampler.seed)
    assert len(loader) == n // size // 4, len(loader)
    plain = tt.prepare_data_loader(DataLoader(ds, batch_size=4))
    assert not plain.sampler.shuffle

    model = tt.prepare_model(torch.nn.Linear(3, 1))
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
    ref = copy.deepcopy(model.module)  # rank 0's weights, not averaged
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    seen = []
    grad_ok = True
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for xb, idx in loader:
            seen.append((epoch, idx.tolist()))
            ref.load_state_dict(model.module.state_dict())
            ref.zero_grad()
            ref(xb).pow(2).mean().backward()
            local = torch.cat([p.grad.flatten() for p in ref.parameters()])
            mean = local.clone()
            dist.all_reduce(mean)
            mean /= size
            opt.zero_grad()
            model(xb).pow(2).mean().backward()
            ddp = torch.cat([p.grad.flatten() for p in model.parameters()])
            grad_ok = grad_ok and torch.allclose(ddp, mean, atol=1e-6) and not torch.allclose(local, mean)
            opt.step()
            train.add_samples(len(idx))

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    all_flat = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(all_flat, flat)
    all_seen = [None] * size
    dist.all_gather_object(all_seen, seen)
    disjoint = True
    for epoch in range(2):
        shards = [set(i for e, b in s if e == epoch for i in b) for s in all_seen]
        disjoint = disjoint and not (shards[0] & shards[1]) and (shards[0] | shards[1]) == set(range(n))
    epochs_differ = [b for e, b in seen if e == 0] != [b for e, b in seen if e == 1]
    train.report({"params_equal": torch.equal(all_flat[0], all_flat[1]), "grad_is_mean": grad_ok,
                  "disjoint": disjoint, "epochs_differ": epochs_differ, "batches": len(seen)})
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TorchDDPTest(unittest.TestCase):
    def test_two_ranks_average_gradients_on_disjoint_shards(self):
        d = tempfile.mkdtemp(prefix="tempotrain-ddp-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "ddp.py"), "w") as f:
            f.write(textwrap.dedent(DDP_FUNC))
        port = str(free_port())
        ranks = []
        for r in range(2):
            env = {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                   "GROUP_RANK": "0", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                   "OMP_NUM_THREADS": "1", "TEMPOTRAIN_PG_TIMEOUT_S": "60"}
            ranks.append(FakeGo(d, "ddp.py:train_func", config={"n": 32}, env=env,
                                context={"world_rank": r, "world_size": 2, "local_rank": r, "local_world_size": 2}))
        for r, g in enumerate(ranks):
            rc = g.wait(timeout=120)
            self.assertEqual(rc, 0, f"rank {r}: {g.messages[-1]}\n{g.stderr}")
            m = g.only("report")["metrics"]
            self.assertEqual(m, {"params_equal": 1, "grad_is_mean": 1, "disjoint": 1, "epochs_differ": 1,
                                 "batches": 8}, f"rank {r}")
            self.assertEqual(sum(s["n"] for s in g.messages if s["op"] == "samples"), 32)
            self.assertEqual(g.ops()[-1], "done")


if __name__ == "__main__":
    unittest.main()

"""Every rank reports its own part of each checkpoint (a checkpoint sharded
across ranks, as FSDP writes one): shard-<rank>.txt and a directory of its
own. On a restart every rank checks that the checkpoint it is given holds
every rank's part. Config: epochs, fail (rank 1 raises in epoch 2 of attempt
1), same (every rank writes the same file name: a conflict).
"""
import os
import tempfile

import tempotrain.train as train


def train_func(config):
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    start = 0
    ck = train.get_checkpoint()
    if ck:
        with ck.as_directory() as d:
            for r in range(world):
                with open(os.path.join(d, "shard-%d.txt" % r)) as f:
                    text = f.read()
                assert text.startswith("rank %d epoch " % r), text
                assert os.path.exists(os.path.join(d, "part-%d" % r, "x")), os.listdir(d)
            with open(os.path.join(d, "shard-%d.txt" % rank)) as f:
                start = int(f.read().split()[-1]) + 1
    for epoch in range(start, config["epochs"]):
        if config.get("fail") and ctx.get_attempt() == 1 and epoch == 2 and rank == 1:
            raise RuntimeError("injected failure")
        d = tempfile.mkdtemp()
        name = "same.txt" if config.get("same") else "shard-%d.txt" % rank
        with open(os.path.join(d, name), "w") as f:
            f.write("rank %d epoch %d" % (rank, epoch))
        os.makedirs(os.path.join(d, "part-%d" % rank))
        with open(os.path.join(d, "part-%d" % rank, "x"), "w") as f:
            f.write("x")
        train.report({"epoch": epoch}, checkpoint=train.Checkpoint.from_directory(d))

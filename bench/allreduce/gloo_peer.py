"""One rank of PyTorch's gloo all_reduce, the peer of `go run ./bench/allreduce`.

Spawned by the Go driver as separate processes, one per rank:
  python3 gloo_peer.py RANK WORLD PORT SIZES REPS
SIZES is a comma-separated list of buffer sizes in bytes (float32 elements =
size/4). For each size, after one warm-up all_reduce, it runs REPS repetitions
of iters(size) back-to-back all_reduce calls (the same iteration rule as the Go
side) between barriers; rank 0 prints one JSON line per size with the
seconds per all_reduce of each repetition, and rank 0's user and system CPU
seconds per all_reduce.
"""
import json
import resource
import sys
import time

import torch
import torch.distributed as dist


def iters(size):
    return max(1, min(1000, (32 << 20) // size))


def main():
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sizes = [int(s) for s in sys.argv[4].split(",")]
    reps = int(sys.argv[5])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(buf)
        n = iters(size)
        times, user, sys_ = [], [], []
        for _ in range(reps):
            dist.barrier()
            t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(n):
                dist.all_reduce(buf)
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            times.append((t1 - t0) / n)
            user.append((r1.ru_utime - r0.ru_utime) / n)
            sys_.append((r1.ru_stime - r0.ru_stime) / n)
        if rank == 0:
            print(json.dumps({"size": size, "ranks": world, "seconds": times, "user": user, "sys": sys_}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

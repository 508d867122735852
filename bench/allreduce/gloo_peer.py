"""One rank of PyTorch's gloo all_reduce, the peer of `go run ./bench/allreduce`.

The Go driver spawns one process per rank:
  python3 gloo_peer.py RANK WORLD PORT [ADDR]
and drives it over stdin, exactly as it drives its own ranks: each line is a
buffer size in bytes (float32 elements = size/4). For a new size the rank
allocates the buffer and runs one warm-up all_reduce; then, between barriers,
it times iters(size) back-to-back all_reduce calls (the same rule as the Go
side), and rank 0 prints one JSON line: seconds per all_reduce, and its own
user and system CPU seconds per all_reduce. End of input ends the process.
"""
import json
import resource
import sys
import time

import torch
import torch.distributed as dist


def iters(size):
    return max(1, min(200, (8 << 20) // size))


def main():
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    addr = sys.argv[4] if len(sys.argv) > 4 else "127.0.0.1"  # rank 0's address
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    size, buf = 0, None
    for line in sys.stdin:
        if int(line) != size:
            size = int(line)
            buf = torch.ones(size // 4, dtype=torch.float32)
            dist.all_reduce(buf)
        n = iters(size)
        dist.barrier()
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            dist.all_reduce(buf)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        if rank == 0:
            print(json.dumps({
                "size": size, "ranks": world, "seconds": (t1 - t0) / n,
                "user": (r1.ru_utime - r0.ru_utime) / n, "sys": (r1.ru_stime - r0.ru_stime) / n,
            }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""PyTorch's side of `benches/distributed.rs` (issue 29): all_reduce of f32 and the halo
exchange of one row each way between two processes over NCCL, timed the same way (rounds of
iterations, a stream sync at the end of each round, the median round).

    python3 -m torch.distributed.run --nproc-per-node 2 benches/distributed_torch.py [MIB [ROW]]

Over sockets: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 before it.
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    row = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    iters, rounds, exchanges = 20, 5, 1000
    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.get_world_size()
    x = torch.zeros(mib * (1 << 20) // 4, dtype=torch.float32, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / iters)
    other = 1 - rank
    out = torch.zeros(row, dtype=torch.uint8, device="cuda")
    into = torch.zeros(row, dtype=torch.uint8, device="cuda")

    def exchange():
        ops = [dist.P2POp(dist.isend, out, other), dist.P2POp(dist.irecv, into, other)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    for _ in range(20):
        exchange()
    torch.cuda.synchronize()
    row_times = []
    for _ in range(rounds):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(exchanges):
            exchange()
        torch.cuda.synchronize()
        row_times.append((time.perf_counter() - start) / exchanges)
    if rank == 0:
        t = sorted(times)[rounds // 2]
        bus = mib * (1 << 20) / t / 1e9 * 2 * (world - 1) / world
        r = sorted(row_times)[rounds // 2]
        transport = "sockets" if os.environ.get("NCCL_P2P_DISABLE") == "1" else "nvlink"
        print(f"| {transport} | PyTorch {torch.__version__} all_reduce {mib} MiB f32 | {bus:.1f} GB/s bus ({t * 1e3:.2f} ms) |")
        print(f"| {transport} | PyTorch batch_isend_irecv of {row} B each way | {r * 1e6:.1f} µs |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The host side's limits for 256 MiB uploads from pageable memory, and PyTorch's own transfers, on
the GPU machine (issue 52): a pageable upload must read the pageable bytes and write them
somewhere the DMA engine reads (pinned memory), so it can go no faster than the host copies
pageable into pinned memory, however it overlaps with the DMA.

    python3 benches/transfers_torch.py [--mib 256] [--rounds 10]

Prints one line per measure: median GB/s and min-max over the rounds.
"""

import argparse
import statistics
import time

import numpy as np
import torch


def rate(label, nbytes, run, rounds):
    run()  # warm-up: first-touch, allocator, contexts
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    gbps = sorted(nbytes / t / 1e9 for t in times)
    print(
        f"{label:58s} {statistics.median(gbps):7.2f} GB/s  ({gbps[0]:.2f}-{gbps[-1]:.2f})",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    n = args.mib << 20
    rounds = args.rounds
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.cuda.get_device_name(0)}, {args.mib} MiB")
    rng = np.random.default_rng(52)
    src_np = rng.integers(0, 255, size=n, dtype=np.uint8)
    dst_np = np.empty_like(src_np)
    rate("host memcpy, one thread (numpy copyto)", n, lambda: np.copyto(dst_np, src_np), rounds)
    src = torch.from_numpy(src_np)
    dst = torch.empty_like(src)
    rate("host memcpy, torch threads (copy_)", n, lambda: dst.copy_(src), rounds)
    pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
    rate("pageable -> pinned, torch threads (copy_)", n, lambda: pinned.copy_(src), rounds)
    device = torch.empty(n, dtype=torch.uint8, device="cuda")

    def pageable_h2d():
        device.copy_(src)
        torch.cuda.synchronize()

    def pinned_h2d():
        device.copy_(pinned, non_blocking=True)
        torch.cuda.synchronize()

    def new_from_pageable():
        t = src.to("cuda")
        torch.cuda.synchronize()
        return t

    def staged_h2d():
        pinned.copy_(src)
        device.copy_(pinned, non_blocking=True)
        torch.cuda.synchronize()

    def pinned_d2h():
        pinned.copy_(device, non_blocking=True)
        torch.cuda.synchronize()

    rate("PyTorch pageable H2D into a tensor (copy_)", n, pageable_h2d, rounds)
    rate("PyTorch new tensor from pageable (.to('cuda'))", n, new_from_pageable, rounds)
    rate("PyTorch pinned H2D (DMA)", n, pinned_h2d, rounds)
    rate("PyTorch pageable -> pinned -> device, not overlapped", n, staged_h2d, rounds)
    rate("PyTorch pinned D2H (DMA)", n, pinned_d2h, rounds)


if __name__ == "__main__":
    main()

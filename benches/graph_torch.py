"""PyTorch's side of `benches/graph.rs` (issue 28): a step of K chained `x.add_(1.0)` on 256
floats, issued eagerly and replayed as a `torch.cuda.CUDAGraph`, each then a
`torch.cuda.synchronize()`; the median of 20 rounds of 200 steps (100 kernels) or 20 (1,000), and
the capture's time.

    python3 benches/graph_torch.py [K ...]
"""

import sys
import time

import torch


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def timed(step, reps):
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / reps)
    return median(times)


def main():
    counts = [int(k) for k in sys.argv[1:]] or [100, 1000]
    x = torch.zeros(256, device="cuda")
    for k in counts:
        reps = max(1, 20000 // k)

        def eager():
            for _ in range(k):
                x.add_(1.0)

        eager()
        t_eager = timed(eager, reps)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            eager()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        start = time.perf_counter()
        with torch.cuda.graph(graph):
            for _ in range(k):
                x.add_(1.0)
        torch.cuda.synchronize()
        capture = time.perf_counter() - start
        t_graph = timed(graph.replay, reps)
        print(
            f"| PyTorch {torch.__version__} | {k} | eager {t_eager * 1e6:.1f} µs "
            f"({t_eager * 1e6 / k:.2f} µs/kernel) | CUDAGraph replay {t_graph * 1e6:.1f} µs "
            f"({t_graph * 1e6 / k:.2f} µs/kernel) | capture {capture * 1e3:.2f} ms |"
        )


if __name__ == "__main__":
    main()

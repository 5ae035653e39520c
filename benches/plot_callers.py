#!/usr/bin/env python3
"""Draws throughput against callers from the CSV files of `benches/callers.rs`.

Usage: python3 benches/plot_callers.py OUT.png CSV [CSV ...]

One panel per backend and workload; one line per build and driver (k calls/s against callers,
log-scaled callers axis). Needs matplotlib (`pip install matplotlib`).
"""

import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, paths = sys.argv[1], sys.argv[2:]
    # (backend, workload) -> (build, driver) -> [(callers, calls per second)]
    panels = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with open(path, newline="") as file:
            for row in csv.DictReader(file):
                line = (row["build"], row["driver"])
                point = (int(row["callers"]), float(row["calls_per_s"]) / 1e3)
                panels[(row["backend"], row["workload"])][line].append(point)
    keys = sorted(panels)
    columns = min(3, len(keys))
    rows = (len(keys) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for axis, key in zip(axes.flat, keys):
        for (build, driver), points in sorted(panels[key].items()):
            points.sort()
            axis.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                label=f"{build}, {driver}",
            )
        axis.set_xscale("log", base=2)
        axis.set_title(f"{key[0]}: {key[1]}")
        axis.set_xlabel("callers")
        axis.set_ylabel("k calls/s")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(keys):]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

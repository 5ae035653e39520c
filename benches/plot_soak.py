#!/usr/bin/env python3
"""Draws the samples of `benches/soak.rs` against time.

Usage: python3 benches/plot_soak.py OUT.png CSV [CSV ...]

Four stacked panels sharing the time axis: device memory reserved (solid) and in use (dashed),
resident memory of the process, the runtime's handle records (indexed handles solid, handle
entities dashed), and frame and blocking-read latency p50 and p99 (log scale). One colour per
CSV, labelled with its backend. Needs matplotlib (`pip install matplotlib`).
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20


def read_samples(path):
    """The CSV's rows as columns of floats, and its backend."""
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        sys.exit(f"{path}: no samples")
    columns = {key: [float(row[key]) for row in rows] for key in rows[0] if key != "backend"}
    return rows[0]["backend"], columns


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, paths = sys.argv[1], sys.argv[2:]
    figure, (memory, rss, handles, latency) = plt.subplots(
        4, 1, figsize=(11, 11), sharex=True
    )
    for index, path in enumerate(paths):
        backend, c = read_samples(path)
        colour = f"C{index}"
        t = c["secs"]
        memory.plot(t, [b / MIB for b in c["reserved_bytes"]], color=colour, label=f"{backend} reserved")
        memory.plot(t, [b / MIB for b in c["in_use_bytes"]], color=colour, linestyle="--", label=f"{backend} in use")
        rss.plot(t, [b / MIB for b in c["rss_bytes"]], color=colour, label=backend)
        handles.plot(t, c["indexed_handles"], color=colour, label=f"{backend} indexed handles")
        handles.plot(t, c["handle_entities"], color=colour, linestyle="--", label=f"{backend} handle entities")
        latency.plot(t, c["frame_p50_us"], color=colour, label=f"{backend} frame p50")
        latency.plot(t, c["frame_p99_us"], color=colour, linestyle="--", label=f"{backend} frame p99")
        latency.plot(t, c["read_p50_us"], color=colour, linestyle=":", label=f"{backend} read p50")
        latency.plot(t, c["read_p99_us"], color=colour, linestyle="-.", label=f"{backend} read p99")
    memory.set_ylabel("device memory (MiB)")
    rss.set_ylabel("resident memory (MiB)")
    handles.set_ylabel("handle records")
    latency.set_ylabel("latency (µs)")
    latency.set_yscale("log")
    latency.set_xlabel("seconds")
    for axis in (memory, rss, handles):
        # From zero, with room above the highest line: a flat line would sit on the frame.
        top = max((max(line.get_ydata(), default=0) for line in axis.get_lines()), default=0)
        axis.set_ylim(bottom=0, top=max(top * 1.15, 1))
    for axis in (memory, rss, handles, latency):
        axis.grid(True, alpha=0.3)
        # Outside the panel, on the right: the lines are flat where a legend would sit.
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.suptitle("soak: samples every second")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

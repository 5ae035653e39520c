#!/usr/bin/env python3
"""Replays gpuworld's allocation traces with PyTorch's CUDA caching allocator (issue 25).

The traces come from the Rust bench (`benches/alloc_traces.rs`), at scale 1 for a GPU: its CUDA run
writes the traces it replays, or it writes them without replaying anything:

    GPUWORLD_TRACES_BACKENDS=none GPUWORLD_TRACES_DUMP=traces cargo bench --bench alloc_traces
    python3 benches/alloc_traces_torch.py traces/*-scale1.trace
    python3 benches/alloc_traces_torch.py --expandable traces/*-scale1.trace

A trace line is `a <id> <bytes>` (allocate on stream 0), `a <id> <bytes> <stream>`, or `f <id>`
(free); `#` lines are comments. An allocation is `torch.empty(bytes, dtype=torch.uint8,
device="cuda")` on the event's stream (stream 0 is the current stream, each other one a
`torch.cuda.Stream`), a free is `del`.

Each trace is replayed twice, as the Rust bench does: "exact" reads torch.cuda.memory_reserved()
after every event, "batched" reads nothing until the end. PyTorch's allocator works as each call
comes, so the two differ only in time, and the exact time is mostly memory_reserved()'s own: it
builds the whole torch.cuda.memory_stats() dictionary (about 90 µs on an H100 machine).

Per replay it prints peak reserved / peak in use (torch.cuda.max_memory_reserved()), reserved
after / peak in use (torch.cuda.memory_reserved() after the last event and a synchronize, buffers
live at the end still held), max allocated / peak in use (torch.cuda.max_memory_allocated(): the
allocator's rounding), wall time, and the replay's cudaMalloc calls and retries
(num_device_alloc, num_alloc_retries). "Peak in use" is the trace's own live peak in requested
bytes, the floor the Rust bench divides by too.

--expandable sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before torch starts;
--csv PATH also writes every replay as CSV.
"""

import argparse
import csv
import os
import sys
import time


def parse_trace(path):
    """The events of a trace file: ("a", id, bytes, stream) and ("f", id)."""
    events = []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split(" ")
            if fields[0] == "a" and len(fields) in (3, 4):
                stream = int(fields[3]) if len(fields) == 4 else 0
                events.append(("a", int(fields[1]), int(fields[2]), stream))
            elif fields[0] == "f" and len(fields) == 2:
                events.append(("f", int(fields[1])))
            else:
                sys.exit(f"{path}:{number}: not a trace event: {line!r}")
    return events


def live_peak(events):
    """The most requested bytes live at once; exits on a free of a buffer not live."""
    live, in_use, peak = {}, 0, 0
    for event in events:
        if event[0] == "a":
            live[event[1]] = event[2]
            in_use += event[2]
            peak = max(peak, in_use)
        elif event[1] in live:
            in_use -= live.pop(event[1])
        else:
            sys.exit(f"the trace frees {event[1]}, which is not live")
    return peak


def replay(torch, events, exact):
    """Replays `events` from an empty cache; returns what the allocator reported."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    streams = {0: torch.cuda.current_stream()}
    for event in events:
        if event[0] == "a" and event[3] not in streams:
            streams[event[3]] = torch.cuda.Stream()
    live = {}
    start = time.perf_counter()
    for event in events:
        if event[0] == "a":
            _, buffer, size, stream = event
            if stream == 0:
                live[buffer] = torch.empty(size, dtype=torch.uint8, device="cuda")
            else:
                with torch.cuda.stream(streams[stream]):
                    live[buffer] = torch.empty(size, dtype=torch.uint8, device="cuda")
        else:
            del live[event[1]]
        if exact:
            torch.cuda.memory_reserved()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    stats = torch.cuda.memory_stats()
    result = {
        "reserved_after": torch.cuda.memory_reserved(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "device_allocs": stats.get("num_device_alloc", -1),
        "alloc_retries": stats.get("num_alloc_retries", -1),
        "seconds": seconds,
    }
    live.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="trace files written by GPUWORLD_TRACES_DUMP")
    parser.add_argument("--expandable", action="store_true", help="expandable_segments:True")
    parser.add_argument("--csv", help="also write every replay to this CSV file")
    args = parser.parse_args()
    if args.expandable:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch  # after PYTORCH_CUDA_ALLOC_CONF is set: the allocator reads it once

    if not torch.cuda.is_available():
        sys.exit("SKIPPED: no CUDA device for PyTorch")
    config = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default")
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"PYTORCH_CUDA_ALLOC_CONF={config}")
    print("| trace | reports | events | peak in use (MiB) | peak reserved / peak in use "
          "| reserved after / peak in use | max allocated / peak in use | time (ms) | µs/event "
          "| device allocs | alloc retries |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for path in args.traces:
        events = parse_trace(path)
        floor = max(live_peak(events), 1)
        name = os.path.basename(path).removesuffix(".trace")
        for reports in ("exact", "batched"):
            r = replay(torch, events, reports == "exact")
            print(f"| {name} | {reports} | {len(events)} | {floor / 2**20:.1f} "
                  f"| {r['max_reserved'] / floor:.3f} | {r['reserved_after'] / floor:.3f} "
                  f"| {r['max_allocated'] / floor:.3f} | {r['seconds'] * 1e3:.1f} "
                  f"| {r['seconds'] * 1e6 / len(events):.2f} "
                  f"| {r['device_allocs']} | {r['alloc_retries']} |", flush=True)
            rows.append({"trace": name, "alloc_conf": config, "reports": reports,
                         "events": len(events), "peak_in_use": floor, **r})
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"every replay: {args.csv}")


if __name__ == "__main__":
    main()

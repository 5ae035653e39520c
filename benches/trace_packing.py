#!/usr/bin/env python3
"""How tightly a trace of `benches/alloc_traces.rs` can be packed without moving a live buffer:
the limit of a pool on a device that cannot map pages (wgpu) and does not move (issue 52).

Each trace (the text `GPUWORLD_TRACES_DUMP` writes) is replayed in one address space of
unbounded size, every request aligned to `--align` bytes, by first fit, best fit and worst fit
over the free ranges (neighbours merged); the peak of the highest address in use over the peak
of bytes live is what a pool with no page boundaries, no device allocation cost and that never
moves a live buffer would reserve. A real pool does worse (pages, sizes of device buffers), or
better only by moving live buffers (the compacting pool), so a ratio here above a target says
the target needs moves.

With `--pages`, also best fit in pages of each size (MiB), a request over a page in a buffer of
its own, empty pages and buffers returned at once: the limit of a paged pool that never moves.

Run: python3 benches/trace_packing.py [--align 256] [--pages 256,1024] TRACE...
"""

import argparse
import bisect
import sys


def parse(path):
    events = []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            if parts[0] == "a":
                events.append(("a", int(parts[1]), int(parts[2])))
            elif parts[0] == "f":
                events.append(("f", int(parts[1]), 0))
            else:
                sys.exit(f"{path}: not an event: {line!r}")
    return events


def replay_paged(events, align, page):
    """Peak of bytes reserved and peak live of `events` placed best fit in pages of `page` bytes
    (a request larger than a page gets a buffer of its own; a page or buffer goes back to the
    device as soon as it is empty): a pool of device buffers that never moves a live one."""
    pages = []  # per page: [free ranges as {start: length}, live count]
    live = {}
    reserved = live_bytes = peak_live = peak_reserved = 0
    for kind, ident, size in events:
        if kind == "a":
            padded = max(align, (size + align - 1) // align * align)
            if padded > page:
                live[ident] = (None, 0, padded)
                reserved += padded
            else:
                chosen = None
                for index, (free, _) in enumerate(pages):
                    if free is None:
                        continue
                    for start, length in free.items():
                        if length >= padded and (chosen is None or length < chosen[2]):
                            chosen = (index, start, length)
                if chosen is None:
                    for index, entry in enumerate(pages):
                        if entry[0] is None:
                            break
                    else:
                        index = len(pages)
                        pages.append([None, 0])
                    pages[index] = [{0: page}, 0]
                    reserved += page
                    chosen = (index, 0, page)
                index, start, length = chosen
                free = pages[index][0]
                del free[start]
                if length > padded:
                    free[start + padded] = length - padded
                pages[index][1] += 1
                live[ident] = (index, start, padded)
            live_bytes += size
            peak_live = max(peak_live, live_bytes)
            peak_reserved = max(peak_reserved, reserved)
        else:
            index, start, padded = live.pop(ident)
            live_bytes -= size
            if index is None:
                reserved -= padded
                continue
            free = pages[index][0]
            end = start + padded
            if end in free:
                padded += free.pop(end)
            before = next((s for s, n in free.items() if s + n == start), None)
            if before is not None:
                free[before] += padded
            else:
                free[start] = padded
            pages[index][1] -= 1
            if pages[index][1] == 0:
                pages[index] = [None, 0]
                reserved -= page
    return peak_reserved, peak_live


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--align", type=int, default=256)
    parser.add_argument(
        "--pages",
        default="",
        help="comma-separated page sizes in MiB: also best fit in pages of each (no moves)",
    )
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    page_sizes = [int(p) << 20 for p in args.pages.split(",") if p]
    paged = "".join(f" pages of {p >> 20} MiB |" for p in page_sizes)
    print("| trace | peak live (MiB) | first fit | best fit | worst fit |" + paged)
    print("| --- | --- | --- | --- | --- |" + " --- |" * len(page_sizes))
    for path in args.traces:
        events = parse(path)
        sizes = {i: s for k, i, s in events if k == "a"}
        # Frees carry the size their allocation had, for the live count.
        events = [(k, i, sizes[i] if k == "f" else s) for k, i, s in events]
        cells = []
        peak_live = 0
        for policy in ("first", "best", "worst"):
            extent, peak_live = replay(events, args.align, policy)
            cells.append(f"{extent / peak_live:.3f}")
        for page in page_sizes:
            peak_reserved, peak_live = replay_paged(events, args.align, page)
            cells.append(f"{peak_reserved / peak_live:.3f}")
        name = path.rsplit("/", 1)[-1]
        print(f"| {name} | {peak_live / 2**20:.1f} | " + " | ".join(cells) + " |")


def replay(events, align, policy):
    """Peak extent and peak live of `events` (each free carrying its allocation's size) placed
    by `policy`: first, best or worst fit."""
    starts, lengths, top = [], {}, 0
    live, live_bytes, peak_live, peak_extent = {}, 0, 0, 0
    for kind, ident, size in events:
        if kind == "a":
            padded = max(align, (size + align - 1) // align * align)
            chosen = None
            for start in starts:
                length = lengths[start]
                if length < padded:
                    continue
                if policy == "first":
                    chosen = start
                    break
                if chosen is None or (
                    length < lengths[chosen] if policy == "best" else length > lengths[chosen]
                ):
                    chosen = start
            if chosen is None:
                if starts and starts[-1] + lengths[starts[-1]] == top:
                    chosen = starts[-1]
                    lengths[chosen] = padded
                else:
                    chosen = top
                    bisect.insort(starts, chosen)
                    lengths[chosen] = padded
                top = max(top, chosen + padded)
            length = lengths.pop(chosen)
            starts.remove(chosen)
            if length > padded:
                bisect.insort(starts, chosen + padded)
                lengths[chosen + padded] = length - padded
            live[ident] = (chosen, padded)
            live_bytes += size
            peak_live = max(peak_live, live_bytes)
            peak_extent = max(peak_extent, max(s + n for s, n in live.values()))
        else:
            start, padded = live.pop(ident)
            live_bytes -= size
            index = bisect.bisect_left(starts, start)
            if index < len(starts) and starts[index] == start + padded:
                padded += lengths.pop(starts.pop(index))
            if index > 0 and starts[index - 1] + lengths[starts[index - 1]] == start:
                lengths[starts[index - 1]] += padded
            else:
                starts.insert(index, start)
                lengths[start] = padded
    return peak_extent, peak_live


if __name__ == "__main__":
    main()

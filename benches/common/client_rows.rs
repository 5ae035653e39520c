//! The public-API benchmark rows of issue 11, written once and generic over the backend. Each row
//! runs through `ComputeClient` the way a user's program calls it (no `sync()` inside a loop
//! unless the row says so) and reports time and memory: criterion times it, and a [`Summary`]
//! keeps what criterion cannot show (bytes reserved afterwards, peak reserved over peak in use)
//! beside the median of the row's own timings, printed as one table at the end. Included by
//! `benches/client.rs` (cpu, wgpu) and `benches/cuda.rs` (beside raw CUDA).

#![allow(dead_code)] // each bench uses the rows it needs

#[path = "training_trace.rs"]
mod training_trace;

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Error, Handle, library};
use std::collections::{HashMap, VecDeque};
use std::hint::black_box;
use std::time::{Duration, Instant};
use training_trace::{Event, committed_trace};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The sizes the rows run at.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Handles created and dropped by the drop loop.
    pub drop_ops: u64,
    /// Allocations made by the ring.
    pub ring_allocs: usize,
    /// Handles the ring keeps live.
    pub ring_live: usize,
    /// Bytes of each ring allocation.
    pub ring_bytes: u64,
    /// Bytes of the read and upload rows.
    pub transfer_bytes: usize,
    /// Round trips timed one by one for the latency row's median.
    pub round_trips: usize,
}

impl Shape {
    /// The sizes, for a GPU with tens of GB: 300k drops, 204,800 allocations of 1 MiB
    /// with 4,000 live.
    pub const DEVICE: Shape = Shape {
        drop_ops: 300_000,
        ring_allocs: 204_800,
        ring_live: 4_000,
        ring_bytes: MIB,
        transfer_bytes: 256 << 20,
        round_trips: 5_000,
    };

    /// For devices whose memory is host memory (cpu, lavapipe): the ring keeps the ratio
    /// of allocations to live handles (51.2) with a tenth of the handles.
    pub const HOST: Shape = Shape {
        drop_ops: 100_000,
        ring_allocs: 20_480,
        ring_live: 400,
        ring_bytes: MIB,
        transfer_bytes: 256 << 20,
        round_trips: 2_000,
    };

    /// [`Shape::HOST`], or [`Shape::DEVICE`] when `GPUWORLD_BENCH_FULL=1`.
    pub fn host_unless_full() -> Shape {
        if std::env::var("GPUWORLD_BENCH_FULL").is_ok_and(|v| v == "1") {
            Shape::DEVICE
        } else {
            Shape::HOST
        }
    }
}

/// What the rows measured, one line per row and backend, printed as a table at the end.
#[derive(Default)]
pub struct Summary {
    lines: Vec<[String; 4]>,
}

impl Summary {
    /// Adds a line: the backend (and driver), the row, its time, its memory.
    pub fn add(&mut self, backend: &str, row: &str, time: String, memory: String) {
        self.lines
            .push([backend.to_owned(), row.to_owned(), time, memory]);
    }

    /// Adds a line for a row that failed (an `OutOfMemory`, a device fault).
    pub fn failed(&mut self, backend: &str, row: &str, error: &Error) {
        eprintln!("{backend} / {row}: FAILED: {error}");
        self.add(backend, row, "FAILED".into(), error.to_string());
    }

    /// Prints the table on stderr (criterion owns stdout).
    pub fn print(&self) {
        eprintln!("\n| backend | row | time | memory |\n| --- | --- | --- | --- |");
        for [backend, row, time, memory] in &self.lines {
            eprintln!("| {backend} | {row} | {time} | {memory} |");
        }
        eprintln!();
    }
}

/// Appends `id value` (tab-separated, one line) to the file `GPUWORLD_BENCH_ROWS` names, for the
/// regression guard (`tools/bench-guard`), which reads the rows of `docs/benchmarks.rows.toml`
/// from it; does nothing without the variable. A row that failed emits nothing, so the guard
/// flags it as missing.
pub fn emit(id: &str, value: f64) {
    use std::io::Write;
    let Some(path) = std::env::var_os("GPUWORLD_BENCH_ROWS") else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{id}\t{value}"));
    if let Err(error) = written {
        eprintln!(
            "GPUWORLD_BENCH_ROWS: writing {id} to {}: {error}",
            path.display()
        );
    }
}

/// The median of `times`; zero when there is none.
pub fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// `bytes` as MiB with two decimals.
pub fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / MIB as f64)
}

/// Bytes per second of `bytes` moved in `time`, as GB/s.
pub fn gb_per_s(bytes: usize, time: Duration) -> String {
    format!("{:.2} GB/s", gb_s(bytes, time))
}

/// Bytes per second of `bytes` moved in `time`, in GB/s, as a number.
pub fn gb_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64().max(1e-12) / 1e9
}

/// A benchmark group for `label` with settings for rows whose iteration is a whole pattern.
pub fn group<'a>(c: &'a mut Criterion, label: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(format!("client/{label}"));
    group.sample_size(10);
    group
}

/// What [`time_runs`] kept: each run's duration and result, and the first error.
type Runs<T> = (Vec<Duration>, Vec<T>, Option<Error>);

/// Runs `run` under criterion as `name`, keeping each run's own duration and result; a run that
/// fails is kept as the first error and later iterations do nothing. `None` when criterion's
/// filter left the benchmark out.
fn time_runs<T>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut run: impl FnMut() -> Result<(Duration, T), Error>,
) -> Option<Runs<T>> {
    let (mut times, mut results, mut failure) = (Vec::new(), Vec::new(), None);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if failure.is_some() {
                    total += Duration::from_nanos(1);
                    continue;
                }
                match run() {
                    Ok((time, result)) => {
                        total += time;
                        times.push(time);
                        results.push(result);
                    }
                    Err(error) => failure = Some(error),
                }
            }
            total
        })
    });
    (!times.is_empty() || failure.is_some()).then_some((times, results, failure))
}

/// Returns what a row left reserved to the device, so the next row starts from nothing (a row
/// that ran out of memory leaves the pool full).
fn settle<B: Backend>(client: &ComputeClient<B>) {
    client.memory_cleanup();
    // Only ticks the cleanup in; a failed row's fault was reported by the row.
    let _ = client.sync();
}

/// Row 1: `drop(client.empty(1 MiB))` × `drop_ops` with one other buffer alive, then one `sync`:
/// time per op, and bytes reserved after the sync (target ≤ 2 MiB).
pub fn drop_loop<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    let row = format!("drop(empty(1 MiB)) x {}, then sync", shape.drop_ops);
    let _other = client.empty(MIB);
    let run = || -> Result<(Duration, u64), Error> {
        let start = Instant::now();
        for _ in 0..shape.drop_ops {
            drop(client.empty(MIB));
        }
        client.sync()?;
        let time = start.elapsed();
        Ok((time, client.memory_usage().bytes_reserved))
    };
    let mut group = group(c, label);
    group.throughput(Throughput::Elements(shape.drop_ops));
    let Some((mut times, reserved, failure)) = time_runs(&mut group, "drop_empty_1MiB", run) else {
        return;
    };
    group.finish();
    settle(client);
    if let Some(error) = failure {
        return summary.failed(label, &row, &error);
    }
    let per_op = median(&mut times).as_secs_f64() * 1e6 / shape.drop_ops as f64;
    emit(&format!("{label}/drop_loop_us_per_op"), per_op);
    summary.add(
        label,
        &row,
        format!("{per_op:.3} µs/op"),
        format!(
            "reserved after: max {} over {} runs",
            mib(reserved.iter().copied().max().unwrap_or(0)),
            reserved.len()
        ),
    );
}

/// Row 2: `ring_allocs` × `empty(ring_bytes)` kept in a ring of `ring_live` handles (the oldest
/// dropped), then one `sync`: time per allocation, and reserved over live bytes after the sync
/// (target ≤ 1.05).
pub fn ring<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    let row = format!(
        "ring: {} x empty({}), {} live, then sync",
        shape.ring_allocs,
        mib(shape.ring_bytes),
        shape.ring_live
    );
    let live_bytes = shape.ring_live as u64 * shape.ring_bytes;
    let run = || -> Result<(Duration, u64), Error> {
        let mut ring = VecDeque::with_capacity(shape.ring_live);
        let start = Instant::now();
        for _ in 0..shape.ring_allocs {
            if ring.len() == shape.ring_live {
                ring.pop_front();
            }
            ring.push_back(client.empty(shape.ring_bytes));
        }
        client.sync()?;
        let time = start.elapsed();
        let reserved = client.memory_usage().bytes_reserved;
        drop(ring);
        client.sync()?;
        Ok((time, reserved))
    };
    let mut group = group(c, label);
    group.throughput(Throughput::Elements(shape.ring_allocs as u64));
    let Some((mut times, reserved, failure)) = time_runs(&mut group, "ring_empty", run) else {
        return;
    };
    group.finish();
    settle(client);
    if let Some(error) = failure {
        return summary.failed(label, &row, &error);
    }
    let per_alloc = median(&mut times).as_secs_f64() * 1e6 / shape.ring_allocs as f64;
    let worst = reserved.iter().copied().max().unwrap_or(0);
    emit(&format!("{label}/ring_us_per_alloc"), per_alloc);
    emit(
        &format!("{label}/ring_reserved_over_live"),
        worst as f64 / live_bytes as f64,
    );
    summary.add(
        label,
        &row,
        format!("{per_alloc:.3} µs/alloc"),
        format!(
            "reserved / live after: max {:.3} ({} / {})",
            worst as f64 / live_bytes as f64,
            mib(worst),
            mib(live_bytes)
        ),
    );
}

/// What one replay of the training trace saw.
struct TraceRun {
    peak_reserved: u64,
    peak_in_use: u64,
    usage_calls: u32,
    usage_time: Duration,
    /// Ticks that ran while the events were sent: how often `memory_usage()` could change.
    ticks: u64,
}

/// Row 3: the committed training trace replayed through the client with no syncs (`p` events in
/// a `memory_persistent_allocation` window), `memory_usage()` after every event: peak reserved
/// over peak in use as the pool saw them at every allocation (target ≤ 1.10; the runtime's
/// peaks), beside the same as those calls saw them (they read what the last tick left, so they
/// miss peaks between ticks), and the time the calls took.
/// Best run first on a fresh client, so that peak is the trace's.
pub fn training_trace<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    summary: &mut Summary,
) {
    let trace = committed_trace();
    let row = format!(
        "training trace ({} events), memory_usage() after each",
        trace.len()
    );
    let run = || -> Result<(Duration, TraceRun), Error> {
        // Start from nothing reserved, as a fresh process would.
        client.memory_cleanup();
        client.sync()?;
        let mut live: HashMap<u32, Handle> = HashMap::new();
        let mut seen = TraceRun {
            peak_reserved: 0,
            peak_in_use: 0,
            usage_calls: 0,
            usage_time: Duration::ZERO,
            ticks: 0,
        };
        let ticks_before = client.with_runtime(|runtime| runtime.tick_count());
        let start = Instant::now();
        for event in &trace {
            match *event {
                Event::Alloc {
                    id,
                    bytes,
                    persistent: true,
                } => {
                    let handle = client.memory_persistent_allocation(bytes, |b| client.empty(b));
                    live.insert(id, handle);
                }
                Event::Alloc { id, bytes, .. } => {
                    live.insert(id, client.empty(bytes));
                }
                Event::Free { id } => {
                    live.remove(&id);
                }
            }
            let asked = Instant::now();
            let usage = client.memory_usage();
            seen.usage_time += asked.elapsed();
            seen.usage_calls += 1;
            seen.peak_reserved = seen.peak_reserved.max(usage.bytes_reserved);
            seen.peak_in_use = seen.peak_in_use.max(usage.bytes_in_use);
        }
        let time = start.elapsed();
        seen.ticks = client.with_runtime(|runtime| runtime.tick_count()) - ticks_before;
        drop(live);
        client.sync()?;
        Ok((time, seen))
    };
    let mut group = group(c, label);
    group.throughput(Throughput::Elements(trace.len() as u64));
    let Some((mut times, runs, failure)) = time_runs(&mut group, "training_trace", run) else {
        return;
    };
    group.finish();
    settle(client);
    if let Some(error) = failure {
        return summary.failed(label, &row, &error);
    }
    let (pool_peak_reserved, pool_peak_in_use) =
        client.with_runtime(|runtime| (runtime.peak_reserved(), runtime.peak_memory()));
    let worst = runs.iter().max_by(|a, b| {
        let ratio = |r: &TraceRun| r.peak_reserved as f64 / r.peak_in_use.max(1) as f64;
        ratio(a).total_cmp(&ratio(b))
    });
    let Some(worst) = worst else { return };
    let usage_per_call = runs
        .iter()
        .map(|r| r.usage_time.as_secs_f64() / f64::from(r.usage_calls.max(1)))
        .fold(0.0, f64::max);
    let replay_ms = median(&mut times).as_secs_f64() * 1e3;
    emit(&format!("{label}/training_trace_ms"), replay_ms);
    emit(
        &format!("{label}/training_trace_peak_ratio"),
        pool_peak_reserved as f64 / pool_peak_in_use.max(1) as f64,
    );
    summary.add(
        label,
        &row,
        format!(
            "{:.1} ms/replay; memory_usage: {:.3} ms per replay, {:.0} ns/call (worst run)",
            replay_ms,
            worst.usage_time.as_secs_f64() * 1e3,
            usage_per_call * 1e9
        ),
        format!(
            "peak reserved / peak in use: {:.3} ({} / {}, as the pool saw them at every allocation); as memory_usage() saw them: max {:.3} ({} / {}; {} ticks in that replay)",
            pool_peak_reserved as f64 / pool_peak_in_use.max(1) as f64,
            mib(pool_peak_reserved),
            mib(pool_peak_in_use),
            worst.peak_reserved as f64 / worst.peak_in_use.max(1) as f64,
            mib(worst.peak_reserved),
            mib(worst.peak_in_use),
            worst.ticks,
        ),
    );
}

/// Row 4: `memory_usage()` alone (target ≤ 1 µs).
pub fn memory_usage<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    summary: &mut Summary,
) {
    const CALLS: u32 = 100_000;
    let _held = client.empty(MIB);
    let mut group = group(c, label);
    group.sample_size(30);
    let mut ran = false;
    group.bench_function("memory_usage", |b| {
        ran = true;
        b.iter(|| black_box(client.memory_usage()))
    });
    group.finish();
    if !ran {
        return;
    }
    let start = Instant::now();
    for _ in 0..CALLS {
        black_box(client.memory_usage());
    }
    let per_call = start.elapsed() / CALLS;
    emit(
        &format!("{label}/memory_usage_ns"),
        per_call.as_secs_f64() * 1e9,
    );
    summary.add(
        label,
        "memory_usage() alone",
        format!("{:.0} ns/call", per_call.as_secs_f64() * 1e9),
        "-".into(),
    );
}

/// Row 5a: `read_one` of `transfer_bytes` into host memory, in GB/s.
pub fn read_large<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    let bytes = shape.transfer_bytes;
    let row = format!("read_one of {}", mib(bytes as u64));
    let handle = client.create(vec![7u8; bytes]);
    let run = || -> Result<(Duration, ()), Error> {
        let start = Instant::now();
        let read = client.read_one(&handle)?;
        let time = start.elapsed();
        assert_eq!(read.len(), bytes, "read_one returns every byte");
        Ok((time, ()))
    };
    let mut group = group(c, label);
    group.throughput(Throughput::Bytes(bytes as u64));
    let Some((mut times, _, failure)) = time_runs(&mut group, "read_one_256MiB", run) else {
        return;
    };
    group.finish();
    if let Some(error) = failure {
        return summary.failed(label, &row, &error);
    }
    let time = median(&mut times);
    emit(&format!("{label}/read_one_256MiB_gbps"), gb_s(bytes, time));
    summary.add(
        label,
        &row,
        gb_per_s(bytes, time),
        format!(
            "reserved after: {}",
            mib(client.memory_usage().bytes_reserved)
        ),
    );
}

/// Row 5b: `create_from_slice` of `transfer_bytes` from a pageable `&[u8]`, then `sync`, in GB/s.
pub fn upload_large<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    let bytes = shape.transfer_bytes;
    let row = format!(
        "create_from_slice of {} (pageable), then sync",
        mib(bytes as u64)
    );
    let data = vec![7u8; bytes];
    let run = || -> Result<(Duration, ()), Error> {
        let start = Instant::now();
        let created = client.create_from_slice(&data);
        client.sync()?;
        let time = start.elapsed();
        drop(created);
        Ok((time, ()))
    };
    let mut group = group(c, label);
    group.throughput(Throughput::Bytes(bytes as u64));
    let Some((mut times, _, failure)) = time_runs(&mut group, "create_from_slice_256MiB", run)
    else {
        return;
    };
    group.finish();
    if let Some(error) = failure {
        return summary.failed(label, &row, &error);
    }
    client.sync().ok();
    let time = median(&mut times);
    emit(
        &format!("{label}/create_from_slice_256MiB_gbps"),
        gb_s(bytes, time),
    );
    summary.add(
        label,
        &row,
        gb_per_s(bytes, time),
        format!(
            "reserved after: {}",
            mib(client.memory_usage().bytes_reserved)
        ),
    );
}

/// Row 6: one launch of `NOOP` then `read_one` of 4 bytes, the median of `round_trips` timed one
/// by one (after a warm-up), with the client's driver named in `label`.
pub fn round_trip<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    let row = "launch NOOP + read_one 4 B (median)";
    let word = client.empty(4);
    let once = || -> Result<Duration, Error> {
        let start = Instant::now();
        client.launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())?;
        let read = client.read_one(&word)?;
        let time = start.elapsed();
        black_box(read.len());
        Ok(time)
    };
    let mut group = group(c, label);
    group.sample_size(30);
    let mut ran = false;
    group.bench_function("launch_noop_read_4B", |b| {
        ran = true;
        b.iter(|| once().map_err(|e| e.to_string()))
    });
    group.finish();
    if !ran {
        return;
    }
    let mut times = Vec::with_capacity(shape.round_trips);
    for _ in 0..shape.round_trips / 10 {
        if let Err(error) = once() {
            return summary.failed(label, row, &error);
        }
    }
    let ticks_before = client.with_runtime(|runtime| runtime.tick_count());
    for _ in 0..shape.round_trips {
        match once() {
            Ok(time) => times.push(time),
            Err(error) => return summary.failed(label, row, &error),
        }
    }
    // One tick per round trip when the reader takes the launch and its read in one tick.
    let ticks = client.with_runtime(|runtime| runtime.tick_count()) - ticks_before;
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    emit(&format!("{label}/round_trip_us"), at(0.5));
    summary.add(
        label,
        row,
        format!("{:.1} µs (p10 {:.1}, p90 {:.1})", at(0.5), at(0.1), at(0.9)),
        format!(
            "{:.2} ticks per round trip",
            ticks as f64 / shape.round_trips as f64
        ),
    );
}

/// Rows 1 to 5 and the round trip on one (fresh) device-thread client.
pub fn all_rows<B: Backend>(
    c: &mut Criterion,
    label: &str,
    client: &ComputeClient<B>,
    shape: Shape,
    summary: &mut Summary,
) {
    // The trace first, while the pool's peak is still the trace's.
    training_trace(c, label, client, summary);
    drop_loop(c, label, client, shape, summary);
    ring(c, label, client, shape, summary);
    memory_usage(c, label, client, summary);
    read_large(c, label, client, shape, summary);
    upload_large(c, label, client, shape, summary);
    round_trip(c, label, client, shape, summary);
}

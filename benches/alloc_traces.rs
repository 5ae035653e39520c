//! Fragmentation and report cost on a family of allocation traces (issue 25): every shape of
//! `common/alloc_traces.rs` × seed × {exact reports, batched} replayed through a fresh
//! `ComputeClient` (`common/alloc_replay.rs`) on cpu, on wgpu with `--features wgpu` and on CUDA
//! with `--features cuda`, each skipped loudly without a device. Prints a table of min–max over
//! seeds per shape and writes every replay to `$GPUWORLD_OUT/alloc_traces.csv` (else
//! `target/alloc_traces.csv`).
//!
//! Run: `cargo bench --bench alloc_traces` (cpu), `--features wgpu`, `--features cuda`.
//! Environment:
//! - `GPUWORLD_TRACES_SEEDS=1,2,3`: the seeds (default 1,2,3);
//! - `GPUWORLD_TRACES_SHAPES=log_uniform,kv_cache`: the shapes (default all);
//! - `GPUWORLD_TRACES_BACKENDS=cuda`: the backends, of those built (default all); `none` replays
//!   nothing and only writes the traces (with `GPUWORLD_TRACES_DUMP`, at scale 1 by default);
//! - `GPUWORLD_TRACES_SCALE=n`: divides every size (default 32 on cpu and on a wgpu adapter
//!   that is a CPU, 1 on GPUs);
//! - `GPUWORLD_TRACES_CACHE=slack,fit`: the pools' `CachePolicy` divisors (default the tight one,
//!   512,8; `3,2` is `CachePolicy::ROOMY`);
//! - `GPUWORLD_TRACES_DUMP=dir`: writes every trace replayed there as text, for
//!   `benches/alloc_traces_torch.py` to replay the same events;
//! - `GPUWORLD_TRACES_COMPACT=0`: without the default ladder's compacting pool (wgpu);
//! - `GPUWORLD_MEMORY_REPEAT_BUFFERS=0`: no buffers of their own for repeated large sizes (every
//!   backend; `cuda_client` reads it from the environment, the others from here);
//! - `GPUWORLD_TRACES_WRITTEN=1`: every allocation written as it is made (moves copy bytes);
//! - `GPUWORLD_TRACES_RAW=0`: no raw-wgpu replay table.

#[path = "common/alloc_replay.rs"]
mod alloc_replay;
#[path = "common/alloc_traces.rs"]
mod alloc_traces;
#[cfg(feature = "wgpu")]
#[path = "common/raw_wgpu_replay.rs"]
mod raw_wgpu_replay;

use alloc_replay::{Replay, Reports, replay};
use alloc_traces::{MIB, Shape, Trace, trace_text};
use gpuworld::{Backend, ComputeClient, Error};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// The scale on devices whose memory is host memory: the largest trace (log_uniform) then peaks
/// near 260 MiB live.
const HOST_SCALE: u64 = 32;

/// What the environment asks for.
struct Settings {
    seeds: Vec<u64>,
    shapes: Vec<Shape>,
    backends: Option<Vec<String>>,
    scale: Option<u64>,
    dump: Option<PathBuf>,
    cache: gpuworld::CachePolicy,
    /// `GPUWORLD_TRACES_COMPACT=0`: the default ladder without its compacting pool (on devices
    /// where making buffers is slow: wgpu).
    compact: bool,
    /// `GPUWORLD_MEMORY_REPEAT_BUFFERS=0`: large requests of recently placed sizes get no buffer
    /// of their own (`MemoryConfig::repeat_buffers`).
    repeat_buffers: bool,
    /// `GPUWORLD_TRACES_WRITTEN=1`: every allocation is written as it is made, so a pool that
    /// moves it copies its bytes.
    written: bool,
    /// `GPUWORLD_TRACES_RAW=0`: no raw-wgpu table (it replays every trace twice more).
    #[cfg_attr(
        not(feature = "wgpu"),
        allow(dead_code, reason = "read by the wgpu table only")
    )]
    raw: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let seeds = var("GPUWORLD_TRACES_SEEDS").map_or_else(
            || vec![1, 2, 3],
            |list| {
                list.split(',')
                    .map(|seed| {
                        seed.trim().parse().unwrap_or_else(|_| {
                            panic!("GPUWORLD_TRACES_SEEDS: `{seed}` is not a number")
                        })
                    })
                    .collect()
            },
        );
        let shapes = var("GPUWORLD_TRACES_SHAPES").map_or_else(
            || Shape::ALL.to_vec(),
            |list| {
                list.split(',')
                    .map(|name| {
                        Shape::from_name(name.trim()).unwrap_or_else(|| {
                            panic!(
                                "GPUWORLD_TRACES_SHAPES: no shape `{name}` (there are {})",
                                Shape::ALL.map(Shape::name).join(", ")
                            )
                        })
                    })
                    .collect()
            },
        );
        let backends = var("GPUWORLD_TRACES_BACKENDS").map(|list| {
            list.split(',')
                .map(|name| match name.trim() {
                    name @ ("cpu" | "wgpu" | "cuda" | "none") => name.to_owned(),
                    _ => panic!(
                        "GPUWORLD_TRACES_BACKENDS: no backend `{name}` (cpu, wgpu, cuda, none)"
                    ),
                })
                .collect()
        });
        let scale = var("GPUWORLD_TRACES_SCALE").map(|scale| match scale.trim().parse() {
            Ok(scale) if scale >= 1 => scale,
            _ => panic!("GPUWORLD_TRACES_SCALE: `{scale}` is not a number from 1 up"),
        });
        let dump = var("GPUWORLD_TRACES_DUMP").map(PathBuf::from);
        let cache = var("GPUWORLD_TRACES_CACHE").map_or(gpuworld::CachePolicy::TIGHT, |pair| {
            let divisors: Vec<u64> = pair
                .split(',')
                .map(|d| {
                    d.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("GPUWORLD_TRACES_CACHE: `{d}` is not a number"))
                })
                .collect();
            match divisors[..] {
                [slack, fit] => gpuworld::CachePolicy::TIGHT
                    .with_slack_divisor(slack)
                    .with_fit_divisor(fit),
                _ => panic!("GPUWORLD_TRACES_CACHE: `{pair}` is not SLACK,FIT"),
            }
        });
        let flag = |name: &str, default: bool| {
            var(name).map_or(default, |value| match value.trim() {
                "1" | "true" => true,
                "0" | "false" => false,
                other => panic!("{name}: `{other}` is not 0, 1, true or false"),
            })
        };
        Settings {
            seeds,
            shapes,
            backends,
            scale,
            dump,
            cache,
            compact: flag("GPUWORLD_TRACES_COMPACT", true),
            // The variable `cuda_client` reads from the environment, read here for the clients
            // this bench configures itself (cpu, wgpu).
            repeat_buffers: flag("GPUWORLD_MEMORY_REPEAT_BUFFERS", true),
            written: flag("GPUWORLD_TRACES_WRITTEN", false),
            raw: flag("GPUWORLD_TRACES_RAW", true),
        }
    }

    /// The memory settings every replay's client gets.
    fn memory(&self) -> gpuworld::MemoryConfig {
        gpuworld::MemoryConfig::default()
            .with_cache(self.cache)
            .with_compact(self.compact)
            .with_repeat_buffers(self.repeat_buffers)
    }

    /// Whether `backend` runs (when built).
    fn runs(&self, backend: &str) -> bool {
        self.backends
            .as_ref()
            .is_none_or(|backends| backends.iter().any(|name| name == backend))
    }

    /// Whether the traces are only written (`GPUWORLD_TRACES_BACKENDS=none`).
    fn dump_only(&self) -> bool {
        self.backends
            .as_ref()
            .is_some_and(|backends| backends.iter().any(|name| name == "none"))
    }
}

/// One replay, or why it failed.
struct Row {
    backend: String,
    shape: Shape,
    seed: u64,
    scale: u64,
    reports: Reports,
    events: usize,
    streams: u32,
    peak_live_buffers: usize,
    largest_alloc: u64,
    result: Result<Replay, String>,
}

/// Every shape × seed × mode on a fresh client from `new_client` per replay.
fn run_backend<B: Backend>(
    backend: &str,
    scale: u64,
    settings: &Settings,
    new_client: impl Fn() -> Result<ComputeClient<B>, Error>,
    rows: &mut Vec<Row>,
) {
    for &shape in &settings.shapes {
        for &seed in &settings.seeds {
            let trace = shape.generate(seed, scale);
            dump(settings, &trace);
            for reports in Reports::BOTH {
                let result = new_client()
                    .and_then(|client| replay(&client, &trace, reports, settings.written))
                    .map_err(|error| error.to_string());
                if let Err(error) = &result {
                    eprintln!(
                        "{backend} / {} seed {seed} / {}: FAILED: {error}",
                        shape.name(),
                        reports.name()
                    );
                }
                rows.push(Row {
                    backend: backend.to_owned(),
                    shape,
                    seed,
                    scale,
                    reports,
                    events: trace.events.len(),
                    streams: trace.streams,
                    peak_live_buffers: trace.peak_live_buffers,
                    largest_alloc: trace.largest_alloc(),
                    result,
                });
            }
        }
    }
}

fn dump(settings: &Settings, trace: &Trace) {
    let Some(dir) = &settings.dump else { return };
    let path = dir.join(trace.file_name());
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, trace_text(trace)))
        .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
}

#[cfg(feature = "cpu")]
fn cpu(settings: &Settings, rows: &mut Vec<Row>, ticks: &mut Vec<TickCost>) {
    use gpuworld::{CpuBackend, Driver, RuntimeConfig};
    // A cap well above the traces at HOST_SCALE: a runtime that piles up reservations fails its
    // row with OutOfMemory instead of exhausting the machine.
    let config = RuntimeConfig::default().with_memory(settings.memory());
    let new_client = || {
        Ok(ComputeClient::new(
            CpuBackend::with_capacity(Some(8 << 30)),
            config.clone(),
            Driver::DeviceThread,
        ))
    };
    let scale = settings.scale.unwrap_or(HOST_SCALE);
    run_backend("cpu", scale, settings, new_client, rows);
    let manual = ComputeClient::new(
        CpuBackend::with_capacity(Some(8 << 30)),
        RuntimeConfig::default(),
        Driver::Manual,
    );
    ticks.push(tick_cost("cpu", &manual));
}

#[cfg(feature = "wgpu")]
fn wgpu(settings: &Settings, rows: &mut Vec<Row>, ticks: &mut Vec<TickCost>) {
    use gpuworld::{Driver, WgpuConfig};
    // The backend's own defaults (as `wgpu_client` opens it), with the cache policy asked for.
    let config = gpuworld::RuntimeConfig::for_backend::<gpuworld::WgpuBackend>()
        .with_memory(settings.memory());
    let new_client = || {
        gpuworld::WgpuBackend::new(WgpuConfig::default())
            .map(|backend| ComputeClient::new(backend, config.clone(), Driver::DeviceThread))
    };
    let adapter = match new_client() {
        Ok(client) => client.properties().name.clone(),
        Err(error) => {
            eprintln!("SKIPPED wgpu traces: no wgpu adapter: {error}");
            return;
        }
    };
    // The adapter's name ends with its device type, e.g. `llvmpipe (Vulkan, Cpu)`.
    let host_memory = adapter.ends_with("Cpu)");
    let scale = settings
        .scale
        .unwrap_or(if host_memory { HOST_SCALE } else { 1 });
    eprintln!("wgpu adapter: {adapter}");
    run_backend("wgpu", scale, settings, new_client, rows);
    if settings.raw {
        raw_wgpu(scale, settings);
    }
    match gpuworld::wgpu_client_with(WgpuConfig::default(), Driver::Manual) {
        Ok(manual) => ticks.push(tick_cost("wgpu", &manual)),
        Err(error) => eprintln!("SKIPPED wgpu tick cost: {error}"),
    }
}

/// Every shape × seed replayed on raw wgpu without a pool (`common/raw_wgpu_replay.rs`), with the
/// backend's buffer usages and without `INDIRECT`: a table of where the time goes.
#[cfg(feature = "wgpu")]
fn raw_wgpu(scale: u64, settings: &Settings) {
    use gpuworld::wgpu::BufferUsages as U;
    let ours = U::STORAGE | U::COPY_SRC | U::COPY_DST | U::INDIRECT;
    println!(
        "\nraw wgpu, no pool (a buffer per allocation, dropped at its free, a poll after every event), scale {scale}:\n\n\
         | shape | seed | usages | buffers | GiB created | time (ms) | in create_buffer (ms) | in drop (ms) | in poll (ms) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for &shape in &settings.shapes {
        for &seed in &settings.seeds {
            let trace = shape.generate(seed, scale);
            for (name, usage) in [("ours", ours), ("no INDIRECT", ours - U::INDIRECT)] {
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                match raw_wgpu_replay::replay(&trace, usage) {
                    Ok(r) => println!(
                        "| {} | {seed} | {name} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} |",
                        shape.name(),
                        r.buffers,
                        r.bytes as f64 / (1u64 << 30) as f64,
                        ms(r.time),
                        ms(r.create),
                        ms(r.free),
                        ms(r.poll)
                    ),
                    Err(error) => {
                        println!("| {} | {seed} | {name} | FAILED: {error} |", shape.name())
                    }
                }
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda(settings: &Settings, rows: &mut Vec<Row>, ticks: &mut Vec<TickCost>) {
    use gpuworld::{CudaConfig, Driver};
    let new_client = || gpuworld::cuda_client(CudaConfig::default());
    match new_client() {
        Ok(client) => eprintln!("cuda device: {}", client.properties().name),
        Err(error) => {
            eprintln!("SKIPPED cuda traces: no CUDA driver or device: {error}");
            return;
        }
    }
    run_backend(
        "cuda",
        settings.scale.unwrap_or(1),
        settings,
        new_client,
        rows,
    );
    match gpuworld::cuda_client_with(CudaConfig::default(), Driver::Manual) {
        Ok(manual) => ticks.push(tick_cost("cuda", &manual)),
        Err(error) => eprintln!("SKIPPED cuda tick cost: {error}"),
    }
}

/// What one tick costs on a backend, through a client with the manual driver: idle, and with one
/// allocation of 1 MiB served by the pool (allocated, dropped, allocated again: the report of the
/// exact replays after an event that allocates), each with the `memory_usage()` report after it.
struct TickCost {
    backend: String,
    idle_us: f64,
    idle_report_us: f64,
    alloc_report_us: f64,
}

/// Ticks timed per measurement.
const TICKS: u32 = 20_000;

fn tick_cost<B: Backend>(backend: &str, client: &ComputeClient<B>) -> TickCost {
    let time = |work: &mut dyn FnMut()| {
        for _ in 0..TICKS / 10 {
            work();
        }
        let start = Instant::now();
        for _ in 0..TICKS {
            work();
        }
        start.elapsed().as_secs_f64() * 1e6 / f64::from(TICKS)
    };
    let idle_us = time(&mut || client.tick());
    let idle_report_us = time(&mut || {
        client.tick();
        std::hint::black_box(client.memory_usage());
    });
    let alloc_report_us = time(&mut || {
        drop(std::hint::black_box(client.empty(MIB)));
        client.tick();
        std::hint::black_box(client.memory_usage());
    });
    TickCost {
        backend: backend.to_owned(),
        idle_us,
        idle_report_us,
        alloc_report_us,
    }
}

/// `min–max` of `values` with `digits` decimals, one number when they agree.
fn range(values: impl Iterator<Item = f64>, digits: usize) -> String {
    let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
        (low.min(value), high.max(value))
    });
    if low > high {
        return "-".into();
    }
    let (low, high) = (format!("{low:.digits$}"), format!("{high:.digits$}"));
    if low == high {
        low
    } else {
        format!("{low}–{high}")
    }
}

/// One line per backend, shape and mode: min–max over its seeds.
fn table(rows: &[Row]) -> String {
    let mut table = String::from(
        "| backend | shape | scale | reports | seeds | events | peak in use (MiB) | peak reserved / peak in use | reserved after / peak in use | device allocations | GiB allocated | GiB moved | time (ms) | µs/event |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut groups: Vec<(&str, Shape, Reports)> = Vec::new();
    for row in rows {
        let key = (row.backend.as_str(), row.shape, row.reports);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (backend, shape, reports) in groups {
        let group: Vec<&Row> = rows
            .iter()
            .filter(|row| row.backend == backend && row.shape == shape && row.reports == reports)
            .collect();
        let replays: Vec<&Replay> = group
            .iter()
            .filter_map(|row| row.result.as_ref().ok())
            .collect();
        let failed = group.len() - replays.len();
        let failures = if failed > 0 {
            format!(" ({failed} FAILED)")
        } else {
            String::new()
        };
        let ms = |replay: &&Replay| replay.time.as_secs_f64() * 1e3;
        let per_event = group
            .iter()
            .filter_map(|row| {
                let replay = row.result.as_ref().ok()?;
                Some(replay.time.as_secs_f64() * 1e6 / row.events as f64)
            })
            .collect::<Vec<_>>();
        let _ = writeln!(
            table,
            "| {backend} | {} | {} | {} | {}{failures} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            shape.name(),
            group[0].scale,
            reports.name(),
            group.len(),
            range(group.iter().map(|row| row.events as f64), 0),
            range(replays.iter().map(|r| r.peak_in_use as f64 / MIB as f64), 1),
            range(replays.iter().map(|r| r.peak_ratio(reports)), 3),
            range(replays.iter().map(|r| r.after_ratio()), 3),
            range(replays.iter().map(|r| r.device_allocations as f64), 0),
            range(
                replays
                    .iter()
                    .map(|r| r.device_bytes_allocated as f64 / (1u64 << 30) as f64),
                2
            ),
            range(
                replays
                    .iter()
                    .map(|r| r.bytes_moved as f64 / (1u64 << 30) as f64),
                2
            ),
            range(replays.iter().map(ms), 1),
            range(per_event.into_iter(), 2),
        );
    }
    table
}

fn csv(rows: &[Row]) -> String {
    let mut csv = String::from(
        "backend,shape,seed,scale,reports,events,streams,peak_live_buffers,largest_alloc,peak_in_use,peak_reserved_reported,pool_peak_reserved,pool_peak_in_use,reserved_after,ticks,device_allocations,device_bytes_allocated,bytes_moved,time_ms,error\n",
    );
    for row in rows {
        let _ = write!(
            csv,
            "{},{},{},{},{},{},{},{},{},",
            row.backend,
            row.shape.name(),
            row.seed,
            row.scale,
            row.reports.name(),
            row.events,
            row.streams,
            row.peak_live_buffers,
            row.largest_alloc
        );
        let _ = match &row.result {
            Ok(r) => writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{:.3},",
                r.peak_in_use,
                r.peak_reserved_reported,
                r.pool_peak_reserved,
                r.pool_peak_in_use,
                r.reserved_after,
                r.ticks,
                r.device_allocations,
                r.device_bytes_allocated,
                r.bytes_moved,
                r.time.as_secs_f64() * 1e3
            ),
            Err(error) => writeln!(csv, ",,,,,,,,,,\"{}\"", error.replace('"', "'")),
        };
    }
    csv
}

fn main() {
    let settings = Settings::from_env();
    if settings.dump_only() {
        let Some(dir) = &settings.dump else {
            panic!("GPUWORLD_TRACES_BACKENDS=none replays nothing: set GPUWORLD_TRACES_DUMP");
        };
        for &shape in &settings.shapes {
            for &seed in &settings.seeds {
                dump(
                    &settings,
                    &shape.generate(seed, settings.scale.unwrap_or(1)),
                );
            }
        }
        println!("traces: {}", dir.display());
        return;
    }
    let mut rows = Vec::new();
    let mut ticks = Vec::new();
    #[cfg(feature = "cpu")]
    if settings.runs("cpu") {
        cpu(&settings, &mut rows, &mut ticks);
    }
    #[cfg(feature = "wgpu")]
    if settings.runs("wgpu") {
        wgpu(&settings, &mut rows, &mut ticks);
    }
    #[cfg(feature = "cuda")]
    if settings.runs("cuda") {
        cuda(&settings, &mut rows, &mut ticks);
    }

    println!(
        "\npeak reserved: the most memory_usage() showed with exact reports (a tick and a report after every event); the runtime's own peak (runtime.peak_reserved()) when batched.\n\
         reserved after: memory_usage() after a sync of every stream at the end, buffers live at the end still held.\n"
    );
    println!("{}", table(&rows));
    println!(
        "tick cost, manual driver, mean of {TICKS} ticks:\n\n| backend | idle tick (µs) | idle tick + memory_usage() (µs) | empty(1 MiB) + drop + tick + memory_usage() (µs) |\n| --- | --- | --- | --- |"
    );
    for tick in &ticks {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} |",
            tick.backend, tick.idle_us, tick.idle_report_us, tick.alloc_report_us
        );
    }
    println!();
    let dir =
        std::env::var_os("GPUWORLD_OUT").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = dir.join("alloc_traces.csv");
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, csv(&rows))) {
        Ok(()) => println!("every replay: {}", path.display()),
        Err(error) => eprintln!("writing {}: {error}", path.display()),
    }
    if let Some(dir) = &settings.dump {
        println!("traces: {}", dir.display());
    }
}

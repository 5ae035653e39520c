//! The long run of issue 30: the soak workload of `common/soak.rs` (a heat step on a persistent
//! field, transient buffers of 4 KiB to 16 MiB, a blocking read every frame, asynchronous reads,
//! every value checked) through one client for minutes, sampled every second: memory in use and
//! reserved, resident memory, handle records, frame and read latency percentiles. Writes the
//! samples to `$GPUWORLD_OUT/soak-<backend>.csv` (else `target/soak-<backend>.csv`) as they are
//! taken, then prints a table of the first minute against the last and the growth per minute;
//! `benches/plot_soak.py` draws the CSV files. A mismatch or error stops the run and fails the
//! process, after the CSV and the table.
//!
//! Run: `cargo bench --bench soak` (cpu), `GPUWORLD_SOAK_BACKEND=wgpu cargo bench --features
//! wgpu --bench soak`, `GPUWORLD_SOAK_BACKEND=cuda cargo bench --features cuda --bench soak`.
//! Environment:
//! - `GPUWORLD_SOAK_SECS=n`: the run's length (default 600);
//! - `GPUWORLD_SOAK_BACKEND=cpu|wgpu|cuda`: the client (default cpu), skipped loudly without a
//!   device;
//! - `GPUWORLD_SOAK_SIZE=n`: the field's side (default 512 on GPUs, 256 on cpu and on a wgpu
//!   adapter that is a CPU).

#[path = "common/soak.rs"]
mod soak;

use gpuworld::{Backend, ComputeClient};
use soak::{CSV_HEADER, MIB, Sample, Settings, Sizes};
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::PathBuf;
use std::time::Duration;

/// The field's side on devices whose memory is host memory.
const HOST_SIDE: u32 = 256;
/// The field's side on GPUs.
const GPU_SIDE: u32 = 512;
/// Every this many samples a progress line goes to stderr.
const PROGRESS_EVERY: usize = 30;

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let number = |name: &str| {
        var(name).map(|value| {
            value
                .trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}: `{value}` is not a number"))
        })
    };
    let secs = number("GPUWORLD_SOAK_SECS").unwrap_or(600);
    let side = number("GPUWORLD_SOAK_SIZE").map(|side| {
        u32::try_from(side).unwrap_or_else(|_| panic!("GPUWORLD_SOAK_SIZE: {side} is too large"))
    });
    let backend = var("GPUWORLD_SOAK_BACKEND").unwrap_or_else(|| "cpu".to_owned());
    let settings = |default_side: u32| Settings {
        sizes: Sizes::bench(side.unwrap_or(default_side)),
        duration: Duration::from_secs(secs),
        interval: Duration::from_secs(1),
    };
    match backend.as_str() {
        "cpu" => cpu(settings(HOST_SIDE)),
        "wgpu" => wgpu(settings),
        "cuda" => cuda(settings(GPU_SIDE)),
        other => panic!("GPUWORLD_SOAK_BACKEND: no backend `{other}` (cpu, wgpu, cuda)"),
    }
}

#[cfg(feature = "cpu")]
fn cpu(settings: Settings) {
    match gpuworld::cpu_client(gpuworld::Driver::DeviceThread) {
        Ok(client) => soak_and_report("cpu", &client, &settings),
        Err(error) => panic!("the cpu client did not open: {error}"),
    }
}

#[cfg(not(feature = "cpu"))]
fn cpu(_: Settings) {
    panic!("GPUWORLD_SOAK_BACKEND=cpu needs the `cpu` feature (a default one)");
}

#[cfg(feature = "wgpu")]
fn wgpu(settings: impl Fn(u32) -> Settings) {
    let client = match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("SKIPPED soak on wgpu: no wgpu adapter: {error}");
            return;
        }
    };
    // The adapter's name ends with its device type, e.g. `llvmpipe (Vulkan, Cpu)`.
    let host_memory = client.properties().name.ends_with("Cpu)");
    let side = if host_memory { HOST_SIDE } else { GPU_SIDE };
    soak_and_report("wgpu", &client, &settings(side));
}

#[cfg(not(feature = "wgpu"))]
fn wgpu(_: impl Fn(u32) -> Settings) {
    panic!("GPUWORLD_SOAK_BACKEND=wgpu needs `--features wgpu`");
}

#[cfg(feature = "cuda")]
fn cuda(settings: Settings) {
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => soak_and_report("cuda", &client, &settings),
        Err(error) => eprintln!("SKIPPED soak on cuda: no CUDA driver or device: {error}"),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: Settings) {
    panic!("GPUWORLD_SOAK_BACKEND=cuda needs `--features cuda`");
}

/// Runs the soak on `client`, writing each sample to the CSV as it comes, then prints the
/// summary; exits with a failure when a check or a call failed.
fn soak_and_report<B: Backend>(backend: &str, client: &ComputeClient<B>, settings: &Settings) {
    let dir =
        std::env::var_os("GPUWORLD_OUT").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {error}", dir.display());
    }
    let path = dir.join(format!("soak-{backend}.csv"));
    let file = File::create(&path)
        .unwrap_or_else(|error| panic!("cannot create {}: {error}", path.display()));
    let mut csv = BufWriter::new(file);
    let write_row = |csv: &mut BufWriter<File>, row: &str| {
        // Flushed row by row: a run killed at minute 9 still leaves its samples.
        if let Err(error) = writeln!(csv, "{row}").and_then(|()| csv.flush()) {
            panic!("cannot write {}: {error}", path.display());
        }
    };
    write_row(&mut csv, CSV_HEADER);
    let sizes = settings.sizes;
    eprintln!(
        "soak on {backend} ({}): {} s, field {}², transients {} / {} / {} KiB every frame, {} KiB every {}th frame",
        client.properties().name,
        settings.duration.as_secs(),
        sizes.side,
        sizes.small >> 10,
        sizes.medium >> 10,
        sizes.large >> 10,
        sizes.huge >> 10,
        sizes.huge_every,
    );
    let mut taken = 0usize;
    let result = soak::run(client, settings, |sample| {
        write_row(&mut csv, &sample.csv_row(backend));
        taken += 1;
        if taken.is_multiple_of(PROGRESS_EVERY) {
            eprintln!(
                "  {:>5.0} s: {} frames, reserved {:.1} MiB, RSS {:.1} MiB, {} handles, frame p99 {:.0} µs",
                sample.secs,
                sample.frames,
                mib(sample.reserved),
                mib(sample.rss),
                sample.indexed_handles,
                sample.frame_p99_us
            );
        }
    });
    eprintln!("wrote {}", path.display());
    print_summary(backend, &result.samples, result.frames);
    if let Some(failure) = result.failure {
        eprintln!("FAILED soak on {backend}: {failure}");
        std::process::exit(1);
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// The first minute against the last (the first and last 10% of the samples in a run shorter
/// than two minutes), the growth per minute after the warm-up, frames and errors.
fn print_summary(backend: &str, samples: &[Sample], frames: u64) {
    let Some(last) = samples.last() else {
        println!("\nsoak on {backend}: no samples ({frames} frames)");
        return;
    };
    let end = last.secs;
    let (first, last_window, label) = if end >= 120.0 {
        let first: Vec<&Sample> = samples.iter().filter(|s| s.secs <= 60.0).collect();
        let last: Vec<&Sample> = samples.iter().filter(|s| s.secs > end - 60.0).collect();
        (first, last, "minute")
    } else {
        let n = (samples.len() / 10).max(1);
        let first = samples.iter().take(n).collect();
        let last = samples.iter().skip(samples.len() - n).collect();
        (first, last, "10%")
    };
    // Name, value, decimals shown.
    type Column = (&'static str, fn(&Sample) -> f64, usize);
    let columns: [Column; 9] = [
        ("reserved (MiB)", |s| mib(s.reserved), 2),
        ("in use (MiB)", |s| mib(s.in_use), 2),
        ("RSS (MiB)", |s| mib(s.rss), 1),
        ("indexed handles", |s| s.indexed_handles as f64, 0),
        ("handle entities", |s| s.handle_entities as f64, 0),
        ("frames/s", |s| s.interval_frames as f64, 0),
        ("frame p50 (µs)", |s| s.frame_p50_us, 0),
        ("frame p99 (µs)", |s| s.frame_p99_us, 0),
        ("read p99 (µs)", |s| s.read_p99_us, 0),
    ];
    println!(
        "\nsoak on {backend}, {end:.0} s, medians of the samples of the first and the last {label}:\n\n\
         | | first {label} | last {label} |\n| --- | --- | --- |"
    );
    for (name, value, decimals) in columns {
        let show = |window: &[&Sample]| {
            let x = median(window.iter().map(|s| value(s)).collect());
            format!("{x:.decimals$}")
        };
        println!("| {name} | {} | {} |", show(&first), show(&last_window));
    }
    // The warm-up: the first 10% or 10 s, whichever is longer, but never more than half.
    let warm_up = (end * 0.1).max(10.0).min(end / 2.0);
    let steady: Vec<&Sample> = samples.iter().filter(|s| s.secs > warm_up).collect();
    let slope = |value: fn(&Sample) -> f64| {
        least_squares_slope(
            &steady
                .iter()
                .map(|s| (s.secs / 60.0, value(s)))
                .collect::<Vec<_>>(),
        )
    };
    println!(
        "| RSS growth (MiB/min, after {warm_up:.0} s) | {:+.3} | |\n\
         | reserved growth (MiB/min, after {warm_up:.0} s) | {:+.3} | |\n\
         | frames | {frames} | |\n| errors | {} | |",
        slope(|s| mib(s.rss)),
        slope(|s| mib(s.reserved)),
        last.errors
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The slope of the least-squares line through `points`; 0 for fewer than two distinct x.
fn least_squares_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if points.len() < 2 || sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

//! Concurrent callers (issue 31): N threads share one client and run one workload each
//! (`common/callers.rs`: mixed, launch-only, read-only), every value checked. For each backend,
//! driver, workload and caller count it prints calls per second, the blocking read's median
//! and p99 latency and the memory the run left reserved, and writes them as CSV to
//! `$GPUWORLD_OUT/callers.csv` (or `target/callers.csv`); `benches/plot_callers.py` draws the PNG
//! of `docs/benchmarks-history.md` (Many callers).
//!
//! Run: `cargo bench --bench callers` (cpu); `--features cuda` adds the CUDA rows on a machine
//! with a driver. Settings from the environment: `GPUWORLD_CALLERS` (caller counts, default
//! `1,2,4,8,16,32`), `GPUWORLD_CALLERS_SECS` (seconds per row, default 2; the table uses
//! 10), `GPUWORLD_CALLERS_WORKLOADS` (names, default all), `GPUWORLD_CALLERS_DRIVERS` (`device`,
//! `manual`; default both), `GPUWORLD_CALLERS_LABEL` (the build's name in the CSV, default
//! `gpuworld`): the same file builds against an older gpuworld for a side-by-side run.

#[path = "common/callers.rs"]
mod callers;

use callers::{Stop, Workload};
use gpuworld::{Backend, ComputeClient, Driver};
use std::io::Write;
use std::time::Duration;

struct Settings {
    callers: Vec<usize>,
    budget: Duration,
    workloads: Vec<Workload>,
    drivers: Vec<Driver>,
    label: String,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let callers = var("GPUWORLD_CALLERS")
            .map(|list| {
                list.split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .expect("GPUWORLD_CALLERS: a list of counts")
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32]);
        let secs: f64 = var("GPUWORLD_CALLERS_SECS")
            .map(|s| s.parse().expect("GPUWORLD_CALLERS_SECS: seconds"))
            .unwrap_or(2.0);
        let workloads = var("GPUWORLD_CALLERS_WORKLOADS")
            .map(|list| {
                list.split(',')
                    .map(|name| {
                        Workload::ALL
                            .into_iter()
                            .find(|w| w.name() == name.trim())
                            .expect("GPUWORLD_CALLERS_WORKLOADS: mixed, launch-only, read-only")
                    })
                    .collect()
            })
            .unwrap_or_else(|| Workload::ALL.to_vec());
        let drivers = var("GPUWORLD_CALLERS_DRIVERS")
            .map(|list| {
                list.split(',')
                    .map(|name| match name.trim() {
                        "device" => Driver::DeviceThread,
                        "manual" => Driver::Manual,
                        other => panic!("GPUWORLD_CALLERS_DRIVERS: device or manual, not {other}"),
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![Driver::DeviceThread, Driver::Manual]);
        Settings {
            callers,
            budget: Duration::from_secs_f64(secs),
            workloads,
            drivers,
            label: var("GPUWORLD_CALLERS_LABEL").unwrap_or_else(|| "gpuworld".into()),
        }
    }
}

/// Context switches of the whole process so far, voluntary (a thread slept) and not (it was
/// preempted), its finished threads included.
fn context_switches() -> u64 {
    // SAFETY: `getrusage` writes only the struct it is given, which is plain data.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0;
        }
        usage
    };
    (usage.ru_nvcsw + usage.ru_nivcsw) as u64
}

fn driver_name(driver: Driver) -> &'static str {
    match driver {
        Driver::DeviceThread => "device thread",
        Driver::Manual => "manual",
        _ => "other",
    }
}

/// Runs every row of one backend; `open` makes a fresh client per row.
fn rows<B: Backend>(
    backend: &str,
    settings: &Settings,
    csv: &mut Vec<String>,
    mut open: impl FnMut(Driver) -> Option<ComputeClient<B>>,
) {
    for &workload in &settings.workloads {
        for &driver in &settings.drivers {
            for &callers in &settings.callers {
                let Some(client) = open(driver) else {
                    eprintln!("SKIPPED {backend}: no device");
                    return;
                };
                // A short warm-up on the same client: pools, pipelines, threads.
                let _ = callers::run(
                    &client,
                    callers,
                    workload,
                    Stop::After(Duration::from_millis(100)),
                );
                let (ticks, switches) = (client.tick_count(), context_switches());
                let outcome =
                    callers::run(&client, callers, workload, Stop::After(settings.budget));
                // What explains the time: ticks, and threads put to sleep or preempted.
                let per_call = |n: u64| n as f64 / outcome.calls.max(1) as f64;
                let ticks = per_call(client.tick_count() - ticks);
                let switches = per_call(context_switches().saturating_sub(switches));
                // Every caller synced before it left: what the run left reserved, beside its time.
                let reserved = client.memory_usage().bytes_reserved;
                drop(client);
                let (label, driver, name) = (&settings.label, driver_name(driver), workload.name());
                let (calls, per_second) = (outcome.calls, outcome.per_second());
                let p50 = outcome.read_p50.as_secs_f64() * 1e6;
                let p99 = outcome.read_p99.as_secs_f64() * 1e6;
                eprintln!(
                    "{label:<10} {backend:<5} {driver:<13} {name:<11} {callers:>2} callers: {calls:>9} calls in {:.2} s = {:>8.1} k/s; read p50 {p50:>8.1} µs, p99 {p99:>9.1} µs; reserved after {:.2} MiB; per call {ticks:.3} ticks, {switches:.3} context switches",
                    outcome.elapsed.as_secs_f64(),
                    per_second / 1e3,
                    reserved as f64 / (1u64 << 20) as f64,
                );
                csv.push(format!(
                    "{label},{backend},{driver},{name},{callers},{calls},{per_second:.0},{p50:.1},{p99:.1},{reserved},{ticks:.4},{switches:.4}"
                ));
            }
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or other flags are not used here.
    let settings = Settings::from_env();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!(
        "callers bench: {cores} cores, {:.1} s per row, callers {:?}",
        settings.budget.as_secs_f64(),
        settings.callers
    );
    let mut csv = vec![
        "build,backend,driver,workload,callers,calls,calls_per_s,read_p50_us,read_p99_us,reserved_after_bytes,ticks_per_call,context_switches_per_call"
            .to_string(),
    ];
    rows("cpu", &settings, &mut csv, |driver| {
        Some(gpuworld::cpu_client(driver).expect("the configuration is readable"))
    });
    #[cfg(feature = "cuda")]
    rows(
        "cuda",
        &settings,
        &mut csv,
        |driver| match gpuworld::cuda_client_with(gpuworld::CudaConfig::default(), driver) {
            Ok(client) => Some(client),
            Err(error) => {
                eprintln!("SKIPPED cuda rows: {error}");
                None
            }
        },
    );
    let dir = std::env::var_os("GPUWORLD_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target"));
    let path = dir.join(format!("callers-{}.csv", settings.label));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::File::create(&path))
        .and_then(|mut file| file.write_all((csv.join("\n") + "\n").as_bytes()));
    match written {
        Ok(()) => eprintln!("wrote {}", path.display()),
        Err(error) => eprintln!("could not write {}: {error}", path.display()),
    }
}

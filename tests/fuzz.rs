//! A seeded differential fuzzer of the public client. Each seed drives a fresh runtime through a
//! random sequence of calls as users make them (creates and uploads of a few bytes to a few MiB,
//! writes and reads of sub-ranges, `read_async` settled later, launches of the library's kernels,
//! handle clones and drops while work is in flight, stream switches, syncs, flushes, cleanups,
//! and misuse that must return the documented `gpuworld::Error`), checks every read byte for byte
//! against a host model (`fuzz/model.rs`), checks after every operation that every pool slice is
//! held by a handle, and ends by dropping everything and checking that no memory stays in use or
//! reserved and the world keeps no record of any handle, pin or reply.
//!
//! Size, by environment variable (defaults keep `cargo test` quick):
//! - `GPUWORLD_FUZZ_OPS`: operations per seed;
//! - `GPUWORLD_FUZZ_SEEDS`: how many seeds (1, 2, ...) each backend runs;
//! - `GPUWORLD_FUZZ_SEED`: run exactly this seed.
//!
//! Leases (`fuzz/leases.rs`) are drawn on the backends that have them (sim, wgpu);
//! `GPUWORLD_FUZZ_NO_LEASES=1` draws none (the sequences from before leases). Misuse may pick a
//! released handle that a lease still pins: its reads, writes and launches must fail with
//! `BindingError::ReleasedHandle` like any released handle's (this fuzzer found them accepted,
//! 2026-12-06, issue 48; `GPUWORLD_FUZZ_SEED=1 cargo test --all-features --test fuzz
//! sim_matches` was the seed that showed it).
//!
//! A failure names the backend and the seed and prints the last operations; the same seed replays
//! the same operations (`GPUWORLD_FUZZ_SEED=7 cargo test --all-features --test fuzz sim`). To
//! find where it went wrong, `GPUWORLD_FUZZ_TRACE=1` prints every operation as it starts and
//! `GPUWORLD_FUZZ_READ_ALL=1` reads every live allocation back after every operation (slow, and
//! the extra reads order streams, which may hide a bug that needs them unordered).

mod common;
mod fuzz {
    pub mod launches;
    pub mod leases;
    pub mod misuse;
    pub mod model;
    pub mod reads;
    pub mod report;
    pub mod rng;
    pub mod session;
}

use common::Skip;
#[cfg(feature = "wgpu")]
use fuzz::leases::ReadBack;
use fuzz::leases::{Lessor, PinOnly};
use fuzz::model::Arithmetic;
use fuzz::report::{OpLog, Tally};
use fuzz::session::Fuzzer;
use gpuworld::{
    Backend, ComputeClient, CpuBackend, Driver, RuntimeConfig, SchedulingStrategy, SimBackend,
    SimConfig,
};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::{Duration, Instant};

test_main![
    cpu_with_the_manual_driver_matches_the_host_model,
    cpu_with_a_device_thread_matches_the_host_model,
    cpu_with_sequential_scheduling_and_short_queues_matches_the_host_model,
    sim_matches_the_host_model,
    sim_with_latency_and_batching_matches_the_host_model,
    cpu_with_compaction_matches_the_host_model,
    sim_with_compaction_matches_the_host_model,
    #[cfg(feature = "wgpu")]
    wgpu_matches_the_host_model,
    #[cfg(feature = "wgpu")]
    wgpu_with_compaction_matches_the_host_model,
    #[cfg(feature = "wgpu")]
    wgpu_with_the_manual_driver_and_little_staging_matches_the_host_model,
    #[cfg(feature = "cuda")]
    cuda_matches_the_host_model,
];

/// A run that makes no progress for this long is reported and the process exits: a hang must
/// fail with the seed and the operations that led to it, not stall CI.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// What a backend runs unless the environment says otherwise.
struct Defaults {
    seeds: u64,
    ops: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.parse() {
        Ok(number) => Some(number),
        Err(_) => panic!("{name}={value} is not a number"),
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|value| value == "1")
}

/// The seeds to run and the operations per seed.
fn plan(defaults: Defaults) -> (Vec<u64>, u64) {
    let ops = env_u64("GPUWORLD_FUZZ_OPS").unwrap_or(defaults.ops);
    let seeds = match env_u64("GPUWORLD_FUZZ_SEED") {
        Some(seed) => vec![seed],
        None => (1..=env_u64("GPUWORLD_FUZZ_SEEDS").unwrap_or(defaults.seeds)).collect(),
    };
    (seeds, ops)
}

/// Runs every planned seed on a fresh client from `make` (`None`: the backend is missing here,
/// already reported by `make`), panicking with a report at the first failure.
fn fuzz<B: Backend>(
    backend: &str,
    test: &str,
    arithmetic: Arithmetic,
    defaults: Defaults,
    lessor: Option<&'static dyn Lessor<B>>,
    make: impl Fn() -> Result<ComputeClient<B>, Skip>,
) -> Result<(), Skip> {
    let (seeds, ops) = plan(defaults);
    let started = Instant::now();
    let mut tally = Tally::default();
    for &seed in &seeds {
        let client = make()?;
        let log = OpLog::new(env_flag("GPUWORLD_FUZZ_TRACE"));
        let report = |error: &str| {
            format!(
                "fuzz failure on {backend}, seed {seed}: {error}\n\
                 reproduce: GPUWORLD_FUZZ_SEED={seed} cargo test --all-features --test fuzz {test}\n\
                 last operations:\n{}",
                log.tail()
            )
        };
        let outcome = std::thread::scope(|scope| {
            let (done, finished) = mpsc::channel::<()>();
            scope.spawn(|| watch_for_stalls(&log, finished, &report));
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut fuzzer = Fuzzer::new(client, seed, arithmetic, &log);
                fuzzer.read_all_after_each_op = env_flag("GPUWORLD_FUZZ_READ_ALL");
                fuzzer.lessor = lessor.filter(|_| !env_flag("GPUWORLD_FUZZ_NO_LEASES"));
                let outcome = fuzzer.run(ops);
                fuzzer.tally.moves = (fuzzer.client.memory_report().iter())
                    .map(|pool| pool.blocks_moved)
                    .sum();
                tally.add(&fuzzer.tally);
                outcome
            }));
            drop(done);
            outcome
        });
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("{}", report(&error)),
            Err(panic) => panic!("{}", report(&panic_text(panic))),
        }
    }
    eprintln!(
        "fuzz {backend}: {} seeds x {ops} operations in {:.1?}: {tally}",
        seeds.len(),
        started.elapsed()
    );
    Ok(())
}

/// Until `finished` closes, checks that the run records operations; after [`STALL_LIMIT`]
/// without one, prints the report and exits the process.
fn watch_for_stalls(
    log: &OpLog,
    finished: mpsc::Receiver<()>,
    report: &(dyn Fn(&str) -> String + Sync),
) {
    let mut seen = log.count();
    let mut since = Instant::now();
    while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(Duration::from_secs(1)) {
        let count = log.count();
        if count != seen {
            (seen, since) = (count, Instant::now());
        } else if since.elapsed() > STALL_LIMIT {
            eprintln!(
                "{}",
                report(&format!("no progress for {STALL_LIMIT:?}: stuck"))
            );
            std::process::exit(1);
        }
    }
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(text) => format!("panic: {text}"),
        Err(panic) => match panic.downcast::<&str>() {
            Ok(text) => format!("panic: {text}"),
            Err(_) => "panic with a non-text payload".to_string(),
        },
    }
}

fn cpu_with_the_manual_driver_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "cpu (Driver::Manual)",
        "cpu_with_the_manual",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        None,
        || Ok(gpuworld::cpu_client(Driver::Manual).unwrap()),
    )
}

fn cpu_with_a_device_thread_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "cpu (Driver::DeviceThread)",
        "cpu_with_a_device_thread",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        None,
        || Ok(gpuworld::cpu_client(Driver::DeviceThread).unwrap()),
    )
}

/// The manual driver with `Sequential` scheduling, one or two tasks per queue and eight stream
/// slots (the configuration of issue 30's rare leak): queues submitted nearly at once, streams
/// one after another, every stream id on a slot of its own.
fn cpu_with_sequential_scheduling_and_short_queues_matches_the_host_model() -> Result<(), Skip> {
    for max_tasks in [1, 2] {
        fuzz(
            &format!("cpu (Driver::Manual, Sequential, max_tasks {max_tasks}, 8 slots)"),
            "cpu_with_sequential",
            Arithmetic::Host,
            Defaults {
                seeds: 2,
                ops: 1500,
            },
            None,
            || {
                let config = RuntimeConfig::default()
                    .with_strategy(SchedulingStrategy::Sequential)
                    .with_max_tasks(max_tasks)
                    .with_stream_slots(8);
                Ok(ComputeClient::new(
                    CpuBackend::default(),
                    config,
                    Driver::Manual,
                ))
            },
        )?;
    }
    Ok(())
}

fn sim_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "sim",
        "sim_matches",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        Some(&PinOnly),
        || {
            Ok(
                gpuworld::sim_client(SimConfig::default().with_record(false))
                    .expect("the sim opens"),
            )
        },
    )
}

/// The sim with slow completions and batched queues: work waits in queues and on the device
/// while later calls arrive.
fn sim_with_latency_and_batching_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "sim (3 ticks of latency, 4 tasks per batch)",
        "sim_with_latency",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        Some(&PinOnly),
        || {
            let backend = SimBackend::new(
                SimConfig::default()
                    .with_latency_ticks(3)
                    .with_record(false),
            );
            let config = RuntimeConfig::default().with_max_tasks(4);
            Ok(ComputeClient::new(backend, config, Driver::Manual))
        },
    )
}

/// Small requests in sliced pages, the rest in a compacting pool of 2 MiB pages: the fuzzer's
/// sizes (up to 9 MiB, 48 MiB live) keep the pools at their budget, so requests move live
/// allocations that streams still read and write, and reuse memory their stream parked.
fn compacting_pools() -> gpuworld::MemoryConfig {
    use gpuworld::{PoolConfig, PoolKind};
    gpuworld::MemoryConfig::with_pools(vec![
        PoolConfig::new(
            PoolKind::Sliced {
                page_size: 256 << 10,
                max_slice: 8 << 10,
                first_page: 64 << 10,
            },
            8 << 10,
        ),
        PoolConfig::new(
            PoolKind::Compacting {
                page_size: 2 << 20,
                follow_peak: false,
            },
            u64::MAX,
        ),
    ])
}

fn cpu_with_compaction_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "cpu (Driver::DeviceThread, compacting pool)",
        "cpu_with_compaction",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        None,
        || {
            Ok(ComputeClient::new(
                CpuBackend::default(),
                RuntimeConfig::default().with_memory(compacting_pools()),
                Driver::DeviceThread,
            ))
        },
    )
}

/// The sim with slow completions and a compacting pool: moves wait for work queued and in
/// flight on every stream.
fn sim_with_compaction_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "sim (3 ticks of latency, compacting pool)",
        "sim_with_compaction",
        Arithmetic::Host,
        Defaults {
            seeds: 2,
            ops: 1500,
        },
        Some(&PinOnly),
        || {
            let backend = SimBackend::new(
                SimConfig::default()
                    .with_latency_ticks(3)
                    .with_record(false),
            );
            let config = RuntimeConfig::default()
                .with_max_tasks(4)
                .with_memory(compacting_pools());
            Ok(ComputeClient::new(backend, config, Driver::Manual))
        },
    )
}

/// wgpu with a compacting pool: moves within a buffer run the word-copy kernel, and pages an
/// evacuation empties go back once the copies ran.
#[cfg(feature = "wgpu")]
fn wgpu_with_compaction_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "wgpu (compacting pool)",
        "wgpu_with_compaction",
        Arithmetic::Gpu,
        Defaults {
            seeds: 1,
            ops: 1000,
        },
        Some(&ReadBack),
        || {
            let backend = common::wgpu_backend_or_skip()?;
            let config = gpuworld::RuntimeConfig::for_backend::<gpuworld::WgpuBackend>()
                .with_memory(compacting_pools());
            Ok(ComputeClient::new(backend, config, Driver::DeviceThread))
        },
    )
}

#[cfg(feature = "wgpu")]
fn wgpu_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "wgpu",
        "wgpu_matches",
        Arithmetic::Gpu,
        Defaults {
            seeds: 2,
            ops: 1000,
        },
        Some(&ReadBack),
        common::wgpu_client_or_skip,
    )
}

/// wgpu with one task per batch and the calls ticking (as the conformance suite's
/// `wgpu_manual`), upload staging small enough that large writes go through the queue, and
/// every dispatch timed.
#[cfg(feature = "wgpu")]
fn wgpu_with_the_manual_driver_and_little_staging_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "wgpu (Driver::Manual, 1 task per batch, 2 MiB of upload staging, timed dispatches)",
        "wgpu_with_the_manual",
        Arithmetic::Gpu,
        Defaults {
            seeds: 1,
            ops: 1000,
        },
        Some(&ReadBack),
        || {
            let config = gpuworld::WgpuConfig::default()
                .with_upload_budget(2 << 20)
                .with_upload_chunk(256 << 10)
                .with_timestamps(true);
            common::wgpu_client_with(config, Driver::Manual)
        },
    )
}

#[cfg(feature = "cuda")]
fn cuda_matches_the_host_model() -> Result<(), Skip> {
    fuzz(
        "cuda",
        "cuda",
        Arithmetic::Gpu,
        Defaults {
            seeds: 2,
            ops: 1000,
        },
        None,
        common::cuda_client_or_skip,
    )
}

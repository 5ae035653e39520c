//! Autotune costs. `hit`: a launch chosen by a tuner whose key is cached, side by side with the
//! same launch made directly (sim backend, hand-ticked, each sample `LAUNCHES_PER_TICK` launches
//! and one tick), plus `select` alone. `tune_matmul`: the time to tune the matmul set for one
//! key from nothing (a fresh runtime and tuner each run) on cpu, sim and, with the `wgpu` or
//! `cuda` feature and a device, wgpu (timed by marks where the adapter has timestamp queries, and
//! again opened without them, timed by host time) and cuda; the candidates' medians are printed
//! once per backend.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::tune::{
    BenchmarkConfig, CacheLocation, MatmulInput, TunableSet, TuneEntry, TuneKey, TuneMode, Tuner,
    TunerConfig, matmul_set,
};
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Driver, Handle, RuntimeConfig, SimBackend,
    SimConfig, library,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// Launches enqueued before each tick.
const LAUNCHES_PER_TICK: u64 = 1000;
/// The matmul tuned by `tune_matmul`: (m, n, k), already powers of two.
const MATMUL_SHAPE: (u32, u32, u32) = (128, 128, 128);

fn sim_client() -> ComputeClient<SimBackend> {
    ComputeClient::new(
        SimBackend::new(
            SimConfig::default()
                .with_latency_ticks(0)
                .with_record(false),
        ),
        RuntimeConfig::default(),
        Driver::Manual,
    )
}

fn tuner<B: Backend>(client: &ComputeClient<B>) -> Tuner<B> {
    Tuner::new(
        client,
        TunerConfig::default()
            .with_benchmark(BenchmarkConfig::default())
            .with_mode(TuneMode::Blocking)
            .with_cache(CacheLocation::Disabled),
    )
}

/// A fill job keyed by its length; both candidates fill, so any winner does the same launch.
#[derive(Clone)]
struct FillJob {
    out: Handle,
    len: u32,
}

fn fill(client: &ComputeClient<SimBackend>, job: &FillJob) -> gpuworld::Result<()> {
    client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&job.out).scalar_f32(1.0),
    )
}

fn fill_set() -> Arc<TunableSet<SimBackend, FillJob, ()>> {
    Arc::new(
        TunableSet::new(
            "bench.fill",
            |job: &FillJob| TuneKey::new([gpuworld::tune::pow2_bucket(u64::from(job.len))]),
            |client, _key, job: &FillJob| {
                Ok(FillJob {
                    out: client.empty(1024),
                    len: job.len,
                })
            },
        )
        .candidate("fill-a", fill)
        .candidate("fill-b", fill),
    )
}

fn hit(c: &mut Criterion) {
    let client = sim_client();
    let job = FillJob {
        out: client.empty(1024),
        len: 256,
    };
    let set = fill_set();
    let tuner = tuner(&client);
    if let Err(error) = tuner.execute(&set, &job) {
        panic!("tuning the bench set failed: {error}");
    }
    client.tick();

    let mut group = c.benchmark_group("autotune/hit");
    group.throughput(Throughput::Elements(LAUNCHES_PER_TICK));
    group.bench_function("plain_launch", |b| {
        b.iter(|| {
            for _ in 0..LAUNCHES_PER_TICK {
                let _ = black_box(fill(&client, black_box(&job)));
            }
            client.tick();
        });
    });
    group.bench_function("tuned_launch", |b| {
        b.iter(|| {
            for _ in 0..LAUNCHES_PER_TICK {
                let _ = black_box(tuner.execute(&set, black_box(&job)));
            }
            client.tick();
        });
    });
    group.finish();

    let mut group = c.benchmark_group("autotune/hit");
    group.bench_function("select", |b| {
        b.iter(|| black_box(tuner.select(&set, black_box(&job))));
    });
    group.finish();
}

fn matmul_input<B: Backend>(client: &ComputeClient<B>) -> MatmulInput {
    let (m, n, k) = MATMUL_SHAPE;
    MatmulInput {
        a: client.empty(u64::from(m * k) * 4),
        b: client.empty(u64::from(k * n) * 4),
        m,
        n,
        k,
    }
}

/// Tunes the matmul set once and prints the candidates' medians, then times tunings from
/// nothing: each run gets a fresh runtime (made outside the timing), whose tune cache is empty.
fn tune_matmul_on<B: Backend>(
    c: &mut Criterion,
    name: &str,
    measurement: Duration,
    make_client: impl Fn() -> Option<ComputeClient<B>>,
) {
    let Some(client) = make_client() else {
        eprintln!("SKIPPED autotune/tune_matmul/{name}: no device");
        return;
    };
    let set = Arc::new(matmul_set::<B>());
    let input = matmul_input(&client);
    match tuner(&client).select(&set, &input) {
        Ok(winner) => {
            client.tick();
            let key = gpuworld::tune::matmul_key(&input).to_string();
            if let Some(TuneEntry::Tuned { outcomes, .. }) =
                client.with_tune_cache(|cache| cache.entry(set.name(), &key))
            {
                let medians: Vec<String> = outcomes
                    .iter()
                    .map(|o| format!("{} {:?}", o.name, o.result))
                    .collect();
                println!(
                    "tune_matmul/{name} {key}: winner {}; medians: {}",
                    set.candidates()[winner].name(),
                    medians.join(", ")
                );
            }
        }
        Err(error) => panic!("tuning matmul on {name} failed: {error}"),
    }
    drop(client);
    let mut group = c.benchmark_group("autotune/tune_matmul");
    group.sample_size(10);
    group.measurement_time(measurement);
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                // A run without a device would time nothing: stop the bench instead.
                let client = make_client().expect("a device for every run");
                let input = matmul_input(&client);
                (client, input)
            },
            |fresh| {
                let (client, input) = &fresh;
                black_box(tuner(client).select(&set, input)).ok();
                fresh
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn tune_matmul(c: &mut Criterion) {
    tune_matmul_on(c, "cpu", Duration::from_secs(10), || {
        Some(gpuworld::cpu_client(Driver::Manual).expect("the configuration is readable"))
    });
    tune_matmul_on(c, "sim", Duration::from_secs(10), || Some(sim_client()));
    #[cfg(feature = "wgpu")]
    // A device per run is slow to make: a shorter measurement keeps the setup time bounded.
    tune_matmul_on(c, "wgpu", Duration::from_secs(4), || {
        gpuworld::wgpu_client(gpuworld::WgpuConfig::default())
            .map_err(|error| eprintln!("no wgpu adapter: {error}"))
            .ok()
    });
    #[cfg(feature = "wgpu")]
    // The same adapter without timestamp queries: marks time nothing, so the tuner times with
    // host wall time, side by side with the marks' device time above.
    tune_matmul_on(c, "wgpu_host_clock", Duration::from_secs(4), || {
        gpuworld::wgpu_client(gpuworld::WgpuConfig::default().with_mark_timestamps(false))
            .map_err(|error| eprintln!("no wgpu adapter: {error}"))
            .ok()
    });
    #[cfg(feature = "cuda")]
    tune_matmul_on(c, "cuda", Duration::from_secs(4), || {
        gpuworld::cuda_client(gpuworld::CudaConfig::default())
            .map_err(|error| eprintln!("no cuda device: {error}"))
            .ok()
    });
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, hit, tune_matmul);
}
criterion_main!(group::benches);

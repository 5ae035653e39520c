//! Runtime overhead per kernel launch on the sim backend: `ComputeClient::launch` through a
//! whole tick, against the same launches made on a `SimBackend` directly, with 0 bindings (NOOP)
//! and 3 bindings (ADD). Each sample is one launch amortised over a tick of `LAUNCHES_PER_TICK`.
//! `runtime/` has the tracing spans compiled in with no subscriber (the default);
//! `runtime_trace_on/` records a trace (`start_trace`) meanwhile.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, ExecutionMode, Handle, Kernel, RuntimeConfig,
    SimBackend, SimConfig, StreamId, library,
};
use gpuworld_systems::backend::{Completion, DeviceStream, LaunchCount, Memory, Queue, Region};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Launches enqueued before each tick (or each backend poll).
const LAUNCHES_PER_TICK: u32 = 1000;
/// Size of each buffer bound to ADD: one cube of 256 `f32`.
const BUFFER_BYTES: u64 = 1024;

fn sim_config() -> SimConfig {
    SimConfig::default()
        .with_latency_ticks(0)
        .with_record(false)
}

/// Ticks after which the traced side starts a fresh trace, so that it does not grow without
/// bound over a run (the restart is part of the measured time).
const TICKS_PER_TRACE: u64 = 64;

/// The runtime side: a client ticked by hand and the handles its launches bind.
struct RuntimeSide {
    client: ComputeClient<SimBackend>,
    buffers: Vec<Handle>,
    /// Whether a trace is recorded, restarted every `TICKS_PER_TRACE` ticks.
    traced: bool,
    ticks: std::cell::Cell<u64>,
}

impl RuntimeSide {
    fn new(buffer_count: usize) -> RuntimeSide {
        let client = ComputeClient::new(
            SimBackend::new(sim_config()),
            RuntimeConfig::default(),
            Driver::Manual,
        );
        let buffers = (0..buffer_count)
            .map(|_| client.empty(BUFFER_BYTES))
            .collect();
        client.tick();
        RuntimeSide {
            client,
            buffers,
            traced: false,
            ticks: std::cell::Cell::new(0),
        }
    }

    fn traced(buffer_count: usize) -> RuntimeSide {
        let side = RuntimeSide {
            traced: true,
            ..RuntimeSide::new(buffer_count)
        };
        side.client.start_trace();
        side
    }

    fn bindings(&self) -> Bindings {
        self.buffers
            .iter()
            .fold(Bindings::new(), |bindings, handle| bindings.buffer(handle))
    }

    /// Enqueues `LAUNCHES_PER_TICK` launches of `kernel`, then runs one tick.
    fn launch_tick(&self, kernel: Kernel) {
        for _ in 0..LAUNCHES_PER_TICK {
            let result =
                self.client
                    .launch(kernel, CubeCount::new_1d(1), black_box(self.bindings()));
            debug_assert!(result.is_ok());
        }
        self.client.tick();
        if self.traced {
            self.ticks.set(self.ticks.get() + 1);
            if self.ticks.get().is_multiple_of(TICKS_PER_TRACE) {
                black_box(self.client.stop_trace().ok());
                self.client.start_trace();
            }
        }
    }

    fn launches_submitted(&self) -> u64 {
        self.client.with_runtime(|runtime| runtime.stats().launches)
    }
}

/// The raw side: the same backend called directly, no runtime in between.
struct RawSide {
    backend: SimBackend,
    stream: DeviceStream,
    regions: Vec<Region>,
    tick: u64,
}

impl RawSide {
    fn new(buffer_count: usize) -> RawSide {
        let mut backend = SimBackend::new(sim_config());
        let stream = backend.create_stream(StreamId { value: 0 });
        let regions = (0..buffer_count)
            .map(|_| Region {
                storage: backend
                    .allocate(BUFFER_BYTES)
                    .expect("the sim has room for a few KiB"),
                offset: 0,
                size: BUFFER_BYTES,
            })
            .collect();
        RawSide {
            backend,
            stream,
            regions,
            tick: 0,
        }
    }

    /// Makes `LAUNCHES_PER_TICK` backend launches of `kernel`, then polls once.
    fn launch_tick(&mut self, kernel: Kernel) {
        for _ in 0..LAUNCHES_PER_TICK {
            // SAFETY: each region is the whole of a buffer `RawSide::new` allocated and nothing frees;
            // the launch is checked.
            unsafe {
                self.backend.launch(
                    self.stream,
                    kernel,
                    LaunchCount::Static([1, 1, 1]),
                    black_box(&self.regions),
                    &[],
                    ExecutionMode::Checked,
                );
            }
        }
        self.tick += 1;
        self.backend.poll(self.tick);
    }
}

/// Runs `tick` once per `LAUNCHES_PER_TICK` iterations and reports the time per launch.
fn time_per_launch(iters: u64, mut tick: impl FnMut()) -> Duration {
    let ticks = iters.div_ceil(u64::from(LAUNCHES_PER_TICK));
    let start = Instant::now();
    for _ in 0..ticks {
        tick();
    }
    let elapsed = start.elapsed();
    elapsed.mul_f64(iters as f64 / (ticks * u64::from(LAUNCHES_PER_TICK)) as f64)
}

fn launch_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("launch_overhead");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(1));

    let cases: [(&str, Kernel); 2] = [
        ("0_bindings", &library::NOOP),
        ("3_bindings", &library::ADD),
    ];
    for (name, kernel) in cases {
        let runtime = RuntimeSide::new(kernel.signature.buffers.len());
        let before = runtime.launches_submitted();
        runtime.launch_tick(kernel);
        assert_eq!(
            runtime.launches_submitted() - before,
            u64::from(LAUNCHES_PER_TICK),
            "every launch must reach the backend within the tick"
        );
        group.bench_function(format!("runtime/{name}"), |b| {
            b.iter_custom(|iters| time_per_launch(iters, || runtime.launch_tick(kernel)));
        });

        let traced = RuntimeSide::traced(kernel.signature.buffers.len());
        group.bench_function(format!("runtime_trace_on/{name}"), |b| {
            b.iter_custom(|iters| time_per_launch(iters, || traced.launch_tick(kernel)));
        });

        let mut raw = RawSide::new(kernel.signature.buffers.len());
        group.bench_function(format!("raw_backend/{name}"), |b| {
            b.iter_custom(|iters| time_per_launch(iters, || raw.launch_tick(kernel)));
        });
    }
    group.finish();
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, launch_overhead);
}
criterion_main!(group::benches);

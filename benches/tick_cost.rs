//! Cost of one tick doing the same new work (10 ADD launches and one 1 KiB write) on the sim
//! backend while 0, 10k or 100k idle handles are live in the world: the tick should scale with
//! the work it is given, not with the number of handles that merely exist.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, Handle, RuntimeConfig, SimBackend, SimConfig,
    library,
};
use std::time::Duration;

/// Numbers of idle handles compared.
const IDLE_HANDLE_COUNTS: [usize; 3] = [0, 10_000, 100_000];
/// Size of each idle handle.
const IDLE_HANDLE_BYTES: u64 = 256;
/// ADD launches per tick.
const LAUNCHES_PER_TICK: usize = 10;
/// Size of each buffer the work binds, and of the write.
const WORK_BYTES: usize = 1024;

/// A runtime holding `idle` live handles nobody uses, plus the three the work binds.
struct World {
    client: ComputeClient<SimBackend>,
    _idle: Vec<Handle>,
    a: Handle,
    b: Handle,
    out: Handle,
    payload: Vec<u8>,
}

impl World {
    fn with_idle_handles(idle: usize) -> World {
        let client = ComputeClient::new(
            SimBackend::new(
                SimConfig::default()
                    .with_latency_ticks(0)
                    .with_record(false),
            ),
            RuntimeConfig::default(),
            Driver::Manual,
        );
        let idle_handles = (0..idle).map(|_| client.empty(IDLE_HANDLE_BYTES)).collect();
        let a = client.empty(WORK_BYTES as u64);
        let b = client.empty(WORK_BYTES as u64);
        let out = client.empty(WORK_BYTES as u64);
        client.tick();
        World {
            client,
            _idle: idle_handles,
            a,
            b,
            out,
            payload: vec![0x3f; WORK_BYTES],
        }
    }

    /// Enqueues the tick's work, then runs one tick.
    fn work_tick(&self) {
        self.client
            .write(&self.a, &self.payload)
            .expect("the payload fits its handle");
        for _ in 0..LAUNCHES_PER_TICK {
            let bindings = Bindings::new()
                .buffer(&self.a)
                .buffer(&self.b)
                .buffer(&self.out);
            self.client
                .launch(&library::ADD, CubeCount::new_1d(1), bindings)
                .expect("ADD takes three buffers");
        }
        self.client.tick();
    }

    fn tasks_submitted(&self) -> u64 {
        self.client
            .with_runtime(|runtime| runtime.stats().tasks_submitted)
    }
}

fn tick_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("tick_cost");
    group
        .sample_size(40)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    for idle in IDLE_HANDLE_COUNTS {
        let world = World::with_idle_handles(idle);
        let before = world.tasks_submitted();
        world.work_tick();
        assert_eq!(
            world.tasks_submitted() - before,
            LAUNCHES_PER_TICK as u64 + 1,
            "the whole work must be submitted within the tick"
        );
        group.bench_with_input(
            BenchmarkId::new("idle_handles", idle),
            &world,
            |bencher, world| bencher.iter(|| world.work_tick()),
        );
    }
    group.finish();
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, tick_cost);
}
criterion_main!(group::benches);

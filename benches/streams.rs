//! Alignment cost per launch on the sim backend: a consumer stream launches a 4-buffer kernel
//! whose buffers were just written by a producer stream (0, 1 or 4 of them), against the same
//! launches and writes all on one stream, side by side in one run.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::kernel::{CpuSource, Param, Signature};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, Handle, KernelDef, RuntimeConfig, SimBackend,
    SimConfig, StreamId, library,
};
use std::time::{Duration, Instant};

/// Consumer launches per tick.
const LAUNCHES_PER_TICK: u32 = 200;

/// A kernel with four buffers that does nothing: only the runtime's work is measured.
static FOUR_BUFFERS: KernelDef = KernelDef {
    id: "bench.four_buffers",
    name: "four_buffers",
    signature: Signature {
        buffers: &[
            Param::f32("a"),
            Param::f32("b"),
            Param::f32("c"),
            Param::f32("d"),
        ],
        scalars: &[],
        cube_dim: [1, 1, 1],
    },
    sources: &[&CpuSource(|_, _| {})],
};

struct Scenario {
    producer: ComputeClient<SimBackend>,
    consumer: ComputeClient<SimBackend>,
    buffers: Vec<Handle>,
    cross: usize,
}

impl Scenario {
    /// `cross` of the four buffers are written by the producer before each consumer launch;
    /// with `one_stream` the producer is the consumer's own stream.
    fn new(cross: usize, one_stream: bool) -> Scenario {
        let client = ComputeClient::new(
            SimBackend::new(
                SimConfig::default()
                    .with_latency_ticks(0)
                    .with_record(false),
            ),
            RuntimeConfig::default(),
            Driver::Manual,
        );
        let consumer = client.with_stream(StreamId { value: 1 });
        let producer = if one_stream {
            consumer.clone()
        } else {
            client.with_stream(StreamId { value: 2 })
        };
        let buffers = (0..4).map(|_| consumer.empty(256)).collect();
        client.tick();
        Scenario {
            producer,
            consumer,
            buffers,
            cross,
        }
    }

    fn tick(&self) {
        for _ in 0..LAUNCHES_PER_TICK {
            for buffer in &self.buffers[..self.cross] {
                let fill = Bindings::new().buffer(buffer).scalar_f32(1.0);
                let _ = self
                    .producer
                    .launch(&library::FILL, CubeCount::new_1d(1), fill);
            }
            let bindings = self
                .buffers
                .iter()
                .fold(Bindings::new(), |b, h| b.buffer(h));
            let _ = self
                .consumer
                .launch(&FOUR_BUFFERS, CubeCount::new_1d(1), bindings);
        }
        self.consumer.tick();
    }
}

fn alignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("alignment_per_launch");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(u64::from(LAUNCHES_PER_TICK)));
    for cross in [0, 1, 4] {
        for (label, one_stream) in [("single_stream", true), ("cross_stream", false)] {
            if cross == 0 && !one_stream {
                continue;
            }
            let scenario = Scenario::new(cross, one_stream);
            group.bench_function(format!("{label}/{cross}_written_by_producer"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        scenario.tick();
                    }
                    start.elapsed()
                });
            });
        }
    }
    group.finish();
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, alignment);
}
criterion_main!(group::benches);

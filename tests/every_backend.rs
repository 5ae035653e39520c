//! The testing kit on every backend (`gpuworld::testing::TestBackend`): a user's kernel with CPU,
//! WGSL and CUDA sources gives the same values on cpu, sim, wgpu and CUDA, each backend a test of
//! its own (ignored, with the reason, where this machine lacks it); and a snapshot names streams
//! by the order its runtime opened them, so the same program shows the same names from any thread.

mod common;

use common::Skip;
use gpuworld::testing::{BackendTest, TestBackend};
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuSource, CubeCount, KernelDef, Param, Signature, StreamId,
};
use std::sync::Mutex;

test_main![
    shift::on_cpu,
    shift::on_sim,
    shift::on_wgpu,
    shift::on_cuda,
    the_macro_runs_a_block_on_cpu_and_sim_and_says_which_backends_it_skipped,
    snapshots_name_streams_alike_from_two_threads_on_cpu,
    snapshots_name_streams_alike_from_two_threads_on_sim,
    snapshots_name_streams_alike_from_two_threads_on_wgpu,
    snapshots_name_streams_alike_from_two_threads_on_cuda,
];

/// `out[i] = x[i] + offset`, 64 units per cube; `x` is read-only. With the sources this build
/// has backends for.
macro_rules! shift_with_sources {
    ($($source:expr),*) => {
        KernelDef {
            id: "every_backend.shift",
            name: "shift",
            signature: Signature {
                buffers: &[Param::f32("x").read_only(), Param::f32("out")],
                scalars: &[Param::f32("offset")],
                cube_dim: [64, 1, 1],
            },
            sources: &[$($source),*],
        }
    };
}

/// The CPU source, which cpu and sim run.
const SHIFT_CPU: CpuSource = CpuSource(|cube, io| {
    for i in cube.units_1d(io.len32(1)) {
        io.store_f32(1, i, io.load_f32(0, i) + io.scalar_f32(0));
    }
});

#[cfg(feature = "wgpu")]
const SHIFT_WGSL: gpuworld::WgslSource = gpuworld::WgslSource(
    "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&out) { out[id.x] = x[id.x] + scalars.offset; }
}",
);

#[cfg(feature = "cuda")]
const SHIFT_CUDA: gpuworld::CudaSource = gpuworld::CudaSource(
    r#"
extern "C" __global__ void shift(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        unsigned int i = GW_FIRST_UNIT_1D + threadIdx.x;
        if (GW_IN_BOUNDS(i, out_len)) out[i] = x[i] + offset;
    }
}
"#,
);

#[cfg(all(feature = "wgpu", feature = "cuda"))]
static SHIFT: KernelDef = shift_with_sources!(&SHIFT_CPU, &SHIFT_WGSL, &SHIFT_CUDA);
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
static SHIFT: KernelDef = shift_with_sources!(&SHIFT_CPU, &SHIFT_WGSL);
#[cfg(all(not(feature = "wgpu"), feature = "cuda"))]
static SHIFT: KernelDef = shift_with_sources!(&SHIFT_CPU, &SHIFT_CUDA);
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
static SHIFT: KernelDef = shift_with_sources!(&SHIFT_CPU);

/// `SHIFT` over 200 values by 1.5 gives each value plus 1.5, and the snapshot names the stream
/// `s0` whatever the thread.
struct ShiftGivesTheSameValues;

impl BackendTest for ShiftGivesTheSameValues {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let x: Vec<f32> = (0..200).map(|i| i as f32 / 4.0).collect();
        let input = client.create_from_slice(bytemuck::cast_slice(&x));
        let out = client.empty(200 * 4);
        let bindings = Bindings::new().buffer(&input).buffer(&out).scalar_f32(1.5);
        client
            .launch(&SHIFT, CubeCount::covering(200, 64), bindings)
            .unwrap();
        let got: Vec<f32> = client.read_one_as(&out).unwrap();
        let expected: Vec<f32> = x.iter().map(|v| v + 1.5).collect();
        assert_eq!(got, expected);
        let snapshot = client.snapshot();
        assert!(snapshot.contains("\n  s0 cursor 3 "), "{snapshot}");
    }
}

/// One test per backend, each run through the kit.
mod shift {
    use super::*;

    pub fn on_cpu() -> Result<(), Skip> {
        Ok(TestBackend::Cpu.run(&ShiftGivesTheSameValues)?)
    }

    pub fn on_sim() -> Result<(), Skip> {
        Ok(TestBackend::Sim.run(&ShiftGivesTheSameValues)?)
    }

    pub fn on_wgpu() -> Result<(), Skip> {
        Ok(TestBackend::Wgpu.run(&ShiftGivesTheSameValues)?)
    }

    pub fn on_cuda() -> Result<(), Skip> {
        Ok(TestBackend::Cuda.run(&ShiftGivesTheSameValues)?)
    }
}

fn the_macro_runs_a_block_on_cpu_and_sim_and_says_which_backends_it_skipped() {
    let runs = gpuworld::on_every_backend!(|client| {
        let x = client.create_from_slice(&[1u8, 2, 3, 4]);
        assert_eq!(client.read_one(&x).unwrap(), [1, 2, 3, 4]);
    });
    assert_eq!(&runs.ran[..2], ["cpu", "sim"]);
    assert_eq!(runs.ran.len() + runs.skipped.len(), TestBackend::ALL.len());
    for skipped in &runs.skipped {
        assert!(!skipped.reason.is_empty(), "{skipped:?}");
        assert!(
            !TestBackend::ALL
                .iter()
                .any(|b| b.name() == skipped.backend && b.required())
        );
    }
}

/// A program on the thread's own stream and the next one (so the two never share a slot); its
/// snapshot once every read replied, less the tick line (how many ticks a blocking call ran
/// depends on when a real device finished), kept for comparison.
#[derive(Default)]
struct TwoStreamSnapshot {
    taken: Mutex<Vec<String>>,
}

impl BackendTest for TwoStreamSnapshot {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let other = client.with_stream(StreamId {
            value: StreamId::current().value + 1,
        });
        let x = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 64]));
        let out = other.empty(64 * 4);
        let bindings = Bindings::new().buffer(&x).buffer(&out).scalar_f32(2.0);
        other
            .launch(&SHIFT, CubeCount::new_1d(1), bindings)
            .unwrap();
        assert_eq!(other.read_one_as::<f32>(&out).unwrap(), [3.0; 64]);
        client.sync().unwrap();
        other.sync().unwrap();
        // A real device finishes when it does: tick until the GC's work is done too.
        for _ in 0..10_000 {
            if !client.with_runtime(|rt| rt.has_work_in_flight()) {
                break;
            }
            client.tick();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let snapshot = client.snapshot();
        let without_tick = snapshot.split_once('\n').map_or("", |(_, rest)| rest);
        self.taken.lock().unwrap().push(without_tick.to_string());
    }
}

/// Runs [`TwoStreamSnapshot`] on `backend` from two new threads, one after the other, and checks
/// that their own streams differ but the snapshots are the same and name them `s0` and `s1`.
fn snapshots_name_streams_alike_from_two_threads(backend: TestBackend) -> Result<(), Skip> {
    let test = TwoStreamSnapshot::default();
    let mut threads = Vec::new();
    for _ in 0..2 {
        let run = std::thread::scope(|scope| {
            scope
                .spawn(|| (StreamId::current(), backend.run(&test)))
                .join()
                .unwrap()
        });
        threads.push(run.0);
        run.1?;
    }
    assert_ne!(threads[0], threads[1], "each thread has its own stream id");
    let taken = test.taken.into_inner().unwrap();
    assert_eq!(taken[0], taken[1], "the second thread's snapshot differs");
    assert!(
        taken[0].contains("  s0 cursor 2 ") && taken[0].contains("  s1 cursor 3 "),
        "{}",
        taken[0]
    );
    Ok(())
}

fn snapshots_name_streams_alike_from_two_threads_on_cpu() -> Result<(), Skip> {
    snapshots_name_streams_alike_from_two_threads(TestBackend::Cpu)
}

fn snapshots_name_streams_alike_from_two_threads_on_sim() -> Result<(), Skip> {
    snapshots_name_streams_alike_from_two_threads(TestBackend::Sim)
}

fn snapshots_name_streams_alike_from_two_threads_on_wgpu() -> Result<(), Skip> {
    snapshots_name_streams_alike_from_two_threads(TestBackend::Wgpu)
}

fn snapshots_name_streams_alike_from_two_threads_on_cuda() -> Result<(), Skip> {
    snapshots_name_streams_alike_from_two_threads(TestBackend::Cuda)
}

//! A differential fuzzer of capture and replay (issue 28): seeded random frames of launches
//! (`FILL`, `COPY`, `ADD`, `SCALE`) and writes over random views of a few buffers on two
//! streams, run eagerly on one runtime and captured once then replayed on another of the same
//! backend, with the same random eager work (writes and launches) between frames, and scalar and data updates to the graph that the eager side makes in its
//! frame. Every buffer must hold the same bytes on both sides at the end. No model is needed:
//! a replay must do exactly what the eager frame does.
//!
//! `GPUWORLD_GRAPH_FUZZ_SEEDS=N` runs seeds `1..=N` (default 12), on cpu, the sim and CUDA (wgpu:
//! at most 4); on cpu, wgpu and CUDA each seed also runs frames of launches on one stream and on
//! both, which those backends replay as one unit. Every backend also runs frames across two
//! runtimes: launches and writes on either, and transfers between them (`to_client_into`: peer
//! copies on CUDA), captured over both at once (`Graph::capture_group`), with eager transfers
//! between replays too.

#[path = "fuzz/rng.rs"]
#[allow(dead_code)]
mod rng;

use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Driver, Graph, Handle, SimBackend, SimConfig,
    StreamId, library,
};
use rng::Rng;

/// A word range of one of the buffers.
#[derive(Clone, Copy, Debug)]
struct View {
    buffer: usize,
    start: usize,
    words: usize,
}

/// One command of a frame.
#[derive(Clone, Debug)]
enum Op {
    Fill {
        out: View,
        value: f32,
    },
    Copy {
        src: View,
        dst: View,
    },
    Add {
        a: View,
        b: View,
        out: View,
    },
    Scale {
        x: View,
        out: View,
        factor: f32,
    },
    Write {
        dst: View,
        data: Vec<f32>,
    },
    /// `src` of the op's runtime into `dst` of runtime `to`.
    Send {
        src: View,
        dst: View,
        to: usize,
    },
}

/// A frame: its ops, each on stream 0 or 1 of runtime 0 or 1.
type Frame = Vec<(Op, u64, usize)>;

/// The buffers of one side, over one runtime or two.
struct Side<B: Backend> {
    runtimes: Vec<Runtime<B>>,
}

/// One runtime of a side: its client, its two streams, the buffers' handles.
struct Runtime<B: Backend> {
    client: ComputeClient<B>,
    streams: [ComputeClient<B>; 2],
    frame_handles: Vec<Handle>,
}

impl<B: Backend> Side<B> {
    fn new(make: &impl Fn() -> ComputeClient<B>, sizes: &[usize], runtimes: usize) -> Side<B> {
        let runtimes = (0..runtimes)
            .map(|_| {
                let client = make();
                let streams = [0, 1].map(|value| client.with_stream(StreamId { value }));
                let frame_handles = sizes
                    .iter()
                    .map(|&words| client.create_from_pod(&vec![0.0f32; words]))
                    .collect();
                Runtime {
                    client,
                    streams,
                    frame_handles,
                }
            })
            .collect();
        Side { runtimes }
    }

    fn run(&self, op: &Op, stream: u64, runtime: usize) -> gpuworld::Result<()> {
        let here = &self.runtimes[runtime];
        if let Op::Send { src, dst, to } = op {
            let there = &self.runtimes[*to];
            return here.streams[stream as usize].to_client_into(
                &here.view(*src),
                &there.streams[stream as usize],
                &there.view(*dst),
            );
        }
        here.run(op, stream)
    }

    fn frame(&self, frame: &Frame) -> gpuworld::Result<()> {
        frame
            .iter()
            .try_for_each(|(op, stream, runtime)| self.run(op, *stream, *runtime))
    }

    fn contents(&self) -> Vec<Vec<u8>> {
        self.runtimes
            .iter()
            .flat_map(|runtime| {
                (runtime.frame_handles.iter())
                    .map(|h| runtime.client.read_one(h).expect("read").into_vec())
            })
            .collect()
    }

    fn tick(&self) {
        self.runtimes.iter().for_each(|r| r.client.tick());
    }
}

impl<B: Backend> Runtime<B> {
    fn view(&self, view: View) -> Handle {
        let handle = &self.frame_handles[view.buffer];
        let end = handle.capacity() - ((view.start + view.words) * 4) as u64;
        handle
            .clone()
            .offset_start((view.start * 4) as u64)
            .offset_end(end)
    }

    fn run(&self, op: &Op, stream: u64) -> gpuworld::Result<()> {
        let c = &self.streams[stream as usize];
        let cubes = |v: &View| CubeCount::new_1d(v.words.div_ceil(256) as u32);
        match op {
            Op::Fill { out, value } => c.launch(
                &library::FILL,
                cubes(out),
                Bindings::new().buffer(&self.view(*out)).scalar_f32(*value),
            ),
            Op::Copy { src, dst } => c.launch(
                &library::COPY,
                cubes(dst),
                Bindings::new()
                    .buffer(&self.view(*src))
                    .buffer(&self.view(*dst)),
            ),
            Op::Add { a, b, out } => c.launch(
                &library::ADD,
                cubes(out),
                Bindings::new()
                    .buffer(&self.view(*a))
                    .buffer(&self.view(*b))
                    .buffer(&self.view(*out)),
            ),
            Op::Scale { x, out, factor } => c.launch(
                &library::SCALE,
                cubes(out),
                Bindings::new()
                    .buffer(&self.view(*x))
                    .buffer(&self.view(*out))
                    .scalar_f32(*factor),
            ),
            Op::Write { dst, data } => c.write(&self.view(*dst), bytemuck::cast_slice(data)),
            Op::Send { .. } => unreachable!("a side runs its transfers"),
        }
    }
}

/// A random view of a random buffer: `words` long when given.
fn random_view(rng: &mut Rng, sizes: &[usize], words: Option<usize>) -> View {
    let buffer = rng.index(sizes.len());
    let size = sizes[buffer];
    let words = words
        .unwrap_or_else(|| rng.between(1, size as u64) as usize)
        .min(size);
    let start = rng.below((size - words + 1) as u64) as usize;
    View {
        buffer,
        start,
        words,
    }
}

/// An output view that shares no word with `inputs` unless it is the same view.
fn output_for(rng: &mut Rng, sizes: &[usize], inputs: &[View], words: usize) -> View {
    for _ in 0..8 {
        let out = random_view(rng, sizes, Some(words));
        let clash = inputs.iter().any(|i| {
            i.buffer == out.buffer
                && !(i.start == out.start && i.words == out.words)
                && i.start < out.start + out.words
                && out.start < i.start + i.words
        });
        if !clash && out.words == words {
            return out;
        }
    }
    inputs[0]
}

fn random_op(rng: &mut Rng, sizes: &[usize]) -> Op {
    random_op_of(rng, sizes, 5)
}

/// A random launch (no write).
fn random_launch(rng: &mut Rng, sizes: &[usize]) -> Op {
    random_op_of(rng, sizes, 4)
}

/// An op on runtime `runtime` of two: a launch, a write or a transfer to the other.
fn random_op_across(rng: &mut Rng, sizes: &[usize], runtime: usize) -> Op {
    if !rng.chance(300) {
        return random_op(rng, sizes);
    }
    let src = random_view(rng, sizes, None);
    let dst = random_view(rng, sizes, Some(src.words));
    let words = src.words.min(dst.words);
    Op::Send {
        src: View { words, ..src },
        dst: View { words, ..dst },
        to: 1 - runtime,
    }
}

/// One of the first `kinds` kinds of op: the launches, then the write.
fn random_op_of(rng: &mut Rng, sizes: &[usize], kinds: u64) -> Op {
    match rng.below(kinds) {
        0 => Op::Fill {
            out: random_view(rng, sizes, None),
            value: rng.normal_f32(),
        },
        1 => {
            let src = random_view(rng, sizes, None);
            let dst = output_for(rng, sizes, &[src], src.words);
            Op::Copy { src, dst }
        }
        2 => {
            let a = random_view(rng, sizes, None);
            let b = random_view(rng, sizes, Some(a.words));
            let words = a.words.min(b.words);
            let (a, b) = (View { words, ..a }, View { words, ..b });
            let out = output_for(rng, sizes, &[a, b], words);
            Op::Add { a, b, out }
        }
        3 => {
            let x = random_view(rng, sizes, None);
            let out = output_for(rng, sizes, &[x], x.words);
            Op::Scale {
                x,
                out,
                factor: rng.normal_f32().clamp(-2.0, 2.0),
            }
        }
        _ => {
            let dst = random_view(rng, sizes, None);
            let data = (0..dst.words).map(|_| rng.normal_f32()).collect();
            Op::Write { dst, data }
        }
    }
}

/// What a captured frame holds.
#[derive(Clone, Copy, PartialEq)]
enum FrameShape {
    /// Launches and writes on both streams.
    Mixed,
    /// Launches on stream 0 only: what a backend may replay as one unit (a CUDA graph, a wgpu
    /// plan, one operation for a cpu worker); the eager work between replays stays mixed.
    LaunchesOnOneStream,
    /// Launches on both streams: one unit with a lane per stream (a CUDA graph's lanes; on cpu
    /// and wgpu the frame's order on the first stream).
    LaunchesOnTwoStreams,
    /// Launches, writes and transfers on two runtimes, captured over both.
    AcrossRuntimes,
}

fn run_seed<B: Backend>(seed: u64, make: impl Fn() -> ComputeClient<B>, manual: bool) {
    run_seed_shaped(seed, make, manual, FrameShape::Mixed);
}

fn run_seed_shaped<B: Backend>(
    seed: u64,
    make: impl Fn() -> ComputeClient<B>,
    manual: bool,
    shape: FrameShape,
) {
    let mut rng = Rng::new(seed);
    let sizes: Vec<usize> = (0..4).map(|_| rng.between(1, 2048) as usize).collect();
    let runtimes = if shape == FrameShape::AcrossRuntimes {
        2
    } else {
        1
    };
    let (eager, replayed) = (
        Side::new(&make, &sizes, runtimes),
        Side::new(&make, &sizes, runtimes),
    );
    let tick = |side: &Side<B>| {
        if manual {
            side.tick();
        }
    };
    // An op for eager work, or for a frame of the mixed shapes.
    let mixed = |rng: &mut Rng| {
        let runtime = rng.index(runtimes);
        let op = match shape {
            FrameShape::AcrossRuntimes => random_op_across(rng, &sizes, runtime),
            _ => random_op(rng, &sizes),
        };
        (op, rng.below(2), runtime)
    };
    let mut frame: Frame = (0..rng.between(1, 12))
        .map(|_| match shape {
            FrameShape::Mixed | FrameShape::AcrossRuntimes => mixed(&mut rng),
            FrameShape::LaunchesOnOneStream => (random_launch(&mut rng, &sizes), 0, 0),
            FrameShape::LaunchesOnTwoStreams => (random_launch(&mut rng, &sizes), rng.below(2), 0),
        })
        .collect();
    eager.frame(&frame).expect("the eager frame");
    let mut graph: Graph<B> = replayed
        .capture(&frame)
        .unwrap_or_else(|error| panic!("seed {seed}: the capture: {error}"));
    assert_eq!(graph.len(), frame.len(), "seed {seed}");
    for round in 0..rng.between(1, 8) {
        // Eager work between frames, the same on both sides.
        for _ in 0..rng.below(4) {
            let (op, stream, runtime) = mixed(&mut rng);
            eager.run(&op, stream, runtime).expect("eager op");
            replayed.run(&op, stream, runtime).expect("eager op");
        }
        // Updates: a scalar or a write's bytes, made to the eager frame and to the graph.
        if rng.chance(500) {
            let node = rng.index(frame.len());
            let value = rng.normal_f32().clamp(-2.0, 2.0);
            let done = match &mut frame[node].0 {
                Op::Fill { value: v, .. } | Op::Scale { factor: v, .. } => {
                    *v = value;
                    graph.set_scalar_f32(node, 0, value)
                }
                Op::Write { data, .. } => {
                    data.iter_mut().for_each(|d| *d = value);
                    graph.set_data(node, bytemuck::cast_slice(data.as_slice()))
                }
                _ => Ok(()),
            };
            done.unwrap_or_else(|error| panic!("seed {seed} round {round}: update: {error}"));
        }
        eager.frame(&frame).expect("the eager frame");
        graph.replay().expect("replay");
        if rng.chance(300) {
            tick(&eager);
            tick(&replayed);
        }
    }
    tick(&eager);
    tick(&replayed);
    let (a, b) = (eager.contents(), replayed.contents());
    for (k, (a, b)) in a.iter().zip(&b).enumerate() {
        assert!(
            a == b,
            "seed {seed}: buffer {k} differs between the eager frames and the replays\nframe: {frame:?}"
        );
    }
}

impl<B: Backend> Side<B> {
    fn capture(&self, frame: &Frame) -> gpuworld::Result<Graph<B>> {
        let clients: Vec<ComputeClient<B>> =
            self.runtimes.iter().map(|r| r.client.clone()).collect();
        Graph::capture_group(&clients, |_| self.frame(frame))
    }
}

fn seeds() -> u64 {
    std::env::var("GPUWORLD_GRAPH_FUZZ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

#[test]
fn replays_do_what_eager_frames_do_on_cpu() {
    for seed in 1..=seeds() {
        run_seed(
            seed,
            || gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client"),
            false,
        );
        for shape in [
            FrameShape::LaunchesOnOneStream,
            FrameShape::LaunchesOnTwoStreams,
            FrameShape::AcrossRuntimes,
        ] {
            run_seed_shaped(
                seed,
                || gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client"),
                false,
                shape,
            );
        }
    }
}

#[test]
fn replays_do_what_eager_frames_do_on_the_sim() {
    let sim = || {
        ComputeClient::new(
            SimBackend::new(SimConfig::default().with_latency_ticks(2)),
            gpuworld::RuntimeConfig::default(),
            Driver::Manual,
        )
    };
    for seed in 1..=seeds() {
        run_seed(seed, sim, true);
        run_seed_shaped(seed, sim, true, FrameShape::AcrossRuntimes);
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn replays_do_what_eager_frames_do_on_wgpu() {
    let open = || gpuworld::wgpu_client(gpuworld::WgpuConfig::default());
    if let Err(error) = open() {
        let required = std::env::var("GPUWORLD_REQUIRE_WGPU").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}"
        );
        eprintln!("SKIPPED: no wgpu adapter: {error}");
        return;
    }
    // Software adapters run a dispatch in ~30-100 µs: a few seeds of each shape; frames of
    // launches on one stream replay from the backend's recorded plan.
    for seed in 1..=seeds().min(4) {
        run_seed(seed, || open().expect("the adapter opened before"), false);
        for shape in [
            FrameShape::LaunchesOnOneStream,
            FrameShape::LaunchesOnTwoStreams,
            FrameShape::AcrossRuntimes,
        ] {
            run_seed_shaped(
                seed,
                || open().expect("the adapter opened before"),
                false,
                shape,
            );
        }
    }
}

#[cfg(feature = "cuda")]
#[test]
fn replays_do_what_eager_frames_do_on_cuda() {
    let open = || gpuworld::cuda_client(gpuworld::CudaConfig::default());
    if let Err(error) = open() {
        let required = std::env::var("GPUWORLD_REQUIRE_CUDA").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "GPUWORLD_REQUIRE_CUDA=1 but there is no CUDA driver: {error}"
        );
        eprintln!("SKIPPED: no CUDA driver: {error}");
        return;
    }
    // Frames of launches replay as CUDA graphs, with a lane per stream.
    for seed in 1..=seeds() {
        run_seed(seed, || open().expect("the driver opened before"), false);
        for shape in [
            FrameShape::LaunchesOnOneStream,
            FrameShape::LaunchesOnTwoStreams,
            FrameShape::AcrossRuntimes,
        ] {
            run_seed_shaped(
                seed,
                || open().expect("the driver opened before"),
                false,
                shape,
            );
        }
    }
}

//! A step of chained small kernels issued eagerly against the same step captured once and
//! replayed (issue 28), through the public client with the device thread, on cpu, wgpu (with
//! `--features wgpu`) and CUDA (`--features cuda`, on the GPU machine): per kernel, `K` launches
//! of `ADD` (`x += ones`, 256 floats: each depends on the one before) then a `sync`, as a user's
//! frame would. The result is checked after each group, and the memory reserved and at its peak
//! is reported beside the times.
//!
//! On CUDA the same step is also timed raw, beside it in the same process: `cuLaunchKernel` of
//! the same `ADD` (the library's CUDA C, compiled with NVRTC) in a loop, and a raw CUDA graph of
//! those launches (stream capture, one `cuGraphLaunch`), each then `cuStreamSynchronize`; and the
//! raw graph again over two buffers of the runtime's pool (`graph/cuda_raw_pool`), which isolates
//! what the buffers' placement costs. PyTorch's side is `benches/graph_torch.py`.
//!
//! `graph/split_*` is a split run's step over two runtimes (two cpu devices; on CUDA two clients
//! of GPU 0, and GPUs 0 and 1 where there are two): `K` chained `ADD`s on each, then a halo of 16
//! floats each way (`to_client_into`: peer copies on CUDA), then a `sync` of both; eager, and
//! captured once over both runtimes (`Graph::capture_group`) and replayed.
//!
//! Beside `eager` and `replay`: `write_*` rows run the step after a 1 KiB write of its input, as a
//! frame that uploads its parameters first; `update_replay` sets a scalar before every replay;
//! `frame_graph` runs the step through a `FrameGraph` (captured after two identical frames; the
//! closure runs every frame in a dry capture, a frame like the graph is one replay); `two_streams_*`
//! runs two chains of `K/2`, one per stream.
//!
//! `cargo bench --bench graph [--features wgpu,cuda]`; `GPUWORLD_GRAPH_KERNELS=100,1000` sets the
//! step sizes, `GPUWORLD_GRAPH_SPLIT_KERNELS=1,10,100` the split step's.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Handle, library};

const FLOATS: usize = 256;

/// The step sizes `GPUWORLD_GRAPH_KERNELS` lists (100 and 1,000 by default).
fn kernels() -> Vec<usize> {
    sizes("GPUWORLD_GRAPH_KERNELS", &[100, 1000])
}

/// The whole numbers the environment variable `var` lists, comma-separated, or `default`.
fn sizes(var: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(var) {
        Ok(list) => (list.split(','))
            .map(|k| {
                k.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{var}: whole numbers"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// The step: `k` chained `x += ones`.
fn step<B: Backend>(client: &ComputeClient<B>, x: &Handle, ones: &Handle, k: usize) {
    for _ in 0..k {
        client
            .launch(
                &library::ADD,
                CubeCount::new_1d(1),
                Bindings::new().buffer(x).buffer(ones).buffer(x),
            )
            .expect("launch");
    }
}

/// A group of this bench's settings: 20 samples over 2 s after 0.5 s of warm-up.
fn bench_group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.sample_size(20);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(2));
    group
}

fn bench_backend<B: Backend>(c: &mut Criterion, name: &str, client: ComputeClient<B>) {
    let mut group = bench_group(c, &format!("graph/{name}"));
    for k in kernels() {
        let x = client.create_from_pod(&[0.0f32; FLOATS]);
        let ones = client.create_from_pod(&[1.0f32; FLOATS]);
        group.throughput(Throughput::Elements(k as u64));
        let mut issued = 0u64;
        group.bench_function(format!("eager/{k}"), |b| {
            b.iter(|| {
                step(&client, &x, &ones, k);
                client.sync().expect("sync");
                issued += k as u64;
            })
        });
        let capture_start = std::time::Instant::now();
        let graph = client
            .capture(|c| {
                step(c, &x, &ones, k);
                Ok(())
            })
            .expect("capture");
        client.sync().expect("sync");
        let capture = capture_start.elapsed();
        issued += k as u64;
        group.bench_function(format!("replay/{k}"), |b| {
            b.iter(|| {
                graph.replay().expect("replay");
                client.sync().expect("sync");
                issued += k as u64;
            })
        });
        // The step after a write of its input (the ones again, 1 KiB), as a frame uploading its
        // parameters: eager, and replayed (the launches after the write one unit). Over a sum of
        // its own: one f32 counts every kernel exactly only up to 2^24.
        let frame_input = [1.0f32; FLOATS];
        let sum = client.create_from_pod(&[0.0f32; FLOATS]);
        let mut summed = 0u64;
        let written_step = |c: &ComputeClient<B>| -> gpuworld::Result<()> {
            c.write(&ones, bytemuck::cast_slice(&frame_input))?;
            step(c, &sum, &ones, k);
            Ok(())
        };
        group.bench_function(format!("write_eager/{k}"), |b| {
            b.iter(|| {
                written_step(&client).expect("step");
                client.sync().expect("sync");
                summed += k as u64;
            })
        });
        let written = client.capture(written_step).expect("capture");
        summed += k as u64;
        group.bench_function(format!("write_replay/{k}"), |b| {
            b.iter(|| {
                written.replay().expect("replay");
                client.sync().expect("sync");
                summed += k as u64;
            })
        });
        drop(written);
        let value = client.read_one_as::<f32>(&sum).expect("read")[0];
        assert!(
            summed >= 1 << 24 || value as u64 == summed,
            "every kernel after a write ran once: {value} against {summed}"
        );
        // A step of `k` scalings (`x *= 1.0`) whose first scalar is set before every replay, as a
        // time step that changes each frame: a new version of the graph each time (on CUDA the
        // executable updated in place, one node; before, a new capture).
        let mut scaled = client
            .capture(|c| {
                for _ in 0..k {
                    c.launch(
                        &library::SCALE,
                        CubeCount::new_1d(1),
                        Bindings::new().buffer(&x).buffer(&x).scalar_f32(1.0),
                    )?;
                }
                Ok(())
            })
            .expect("capture");
        group.bench_function(format!("update_replay/{k}"), |b| {
            b.iter(|| {
                scaled.set_scalar_f32(0, 0, 1.0).expect("update");
                scaled.replay().expect("replay");
                client.sync().expect("sync");
            })
        });
        drop(scaled);
        // The same step through a FrameGraph: the closure runs every frame in a dry capture,
        // and a frame equal to the captured one is one replay.
        let mut frames = gpuworld::FrameGraph::new(&client, 2);
        group.bench_function(format!("frame_graph/{k}"), |b| {
            b.iter(|| {
                frames
                    .run(|c| {
                        step(c, &x, &ones, k);
                        Ok(())
                    })
                    .expect("frame");
                client.sync().expect("sync");
                issued += k as u64;
            })
        });
        // The same number of kernels as two chains of k/2, one per stream: eager, and replayed
        // (on CUDA one graph with a lane per stream, the chains running side by side).
        let streams = [0, 1].map(|value| client.with_stream(gpuworld::StreamId { value }));
        let chains = [0, 1].map(|_| client.create_from_pod(&[0.0f32; FLOATS]));
        let two_chains = |c: &[ComputeClient<B>; 2]| {
            for (stream, x) in c.iter().zip(&chains) {
                step(stream, x, &ones, k / 2);
            }
        };
        group.bench_function(format!("two_streams_eager/{k}"), |b| {
            b.iter(|| {
                two_chains(&streams);
                streams.iter().for_each(|s| s.sync().expect("sync"));
            })
        });
        let two = client
            .capture(|_| {
                two_chains(&streams);
                Ok(())
            })
            .expect("capture");
        group.bench_function(format!("two_streams_replay/{k}"), |b| {
            b.iter(|| {
                two.replay().expect("replay");
                streams.iter().for_each(|s| s.sync().expect("sync"));
            })
        });
        drop(two);
        let value = client.read_one_as::<f32>(&x).expect("read")[0];
        assert_eq!(
            value as u64, issued,
            "every kernel ran once: {value} against {issued}"
        );
        let usage = client.memory_usage();
        eprintln!(
            "graph/{name}/{k}: capture (warm-up run included) {:.1} µs; reserved {} B, peak in use {} B",
            capture.as_secs_f64() * 1e6,
            usage.bytes_reserved,
            client.with_runtime(|rt| rt.peak_memory()),
        );
    }
    group.finish();
}

/// Words each runtime of a split step sends the other.
const HALO: usize = 16;

/// A split step: `k` chained `x += ones` on each runtime, then each sends its first `HALO`
/// floats into the other's last ones.
fn split_step<B: Backend>(
    clients: &[ComputeClient<B>],
    state: &[(Handle, Handle); 2],
    k: usize,
) -> gpuworld::Result<()> {
    for (client, (x, ones)) in clients.iter().zip(state) {
        step(client, x, ones, k);
    }
    let words = |x: &Handle, start: usize| {
        x.clone()
            .offset_start((start * 4) as u64)
            .offset_end(((FLOATS - start - HALO) * 4) as u64)
    };
    let ((xa, _), (xb, _)) = (&state[0], &state[1]);
    clients[0].to_client_into(&words(xa, 0), &clients[1], &words(xb, FLOATS - HALO))?;
    clients[1].to_client_into(&words(xb, 0), &clients[0], &words(xa, FLOATS - HALO))
}

fn bench_split<B: Backend>(c: &mut Criterion, name: &str, clients: [ComputeClient<B>; 2]) {
    let mut group = bench_group(c, &format!("graph/split_{name}"));
    let sync = || clients.iter().for_each(|c| c.sync().expect("sync"));
    for k in sizes("GPUWORLD_GRAPH_SPLIT_KERNELS", &[1, 10, 100]) {
        let state = [0, 1].map(|i| {
            (
                clients[i].create_from_pod(&[0.0f32; FLOATS]),
                clients[i].create_from_pod(&[1.0f32; FLOATS]),
            )
        });
        let mut steps = 0u64;
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("eager/{k}"), |b| {
            b.iter(|| {
                split_step(&clients, &state, k).expect("step");
                sync();
                steps += 1;
            })
        });
        let capture_start = std::time::Instant::now();
        let graph = gpuworld::Graph::capture_group(&clients, |c| split_step(c, &state, k))
            .expect("capture");
        sync();
        let capture = capture_start.elapsed();
        steps += 1;
        group.bench_function(format!("replay/{k}"), |b| {
            b.iter(|| {
                graph.replay().expect("replay");
                sync();
                steps += 1;
            })
        });
        // Every step added `k` to the words nobody overwrote.
        let middle = clients[0].read_one_as::<f32>(&state[0].0).expect("read")[HALO];
        assert_eq!(middle as u64, steps * k as u64, "every step ran once");
        eprintln!(
            "graph/split_{name}/{k}: capture (warm-up step included) {:.1} µs; reserved {} B and {} B",
            capture.as_secs_f64() * 1e6,
            clients[0].memory_usage().bytes_reserved,
            clients[1].memory_usage().bytes_reserved,
        );
    }
    group.finish();
}

fn graphs(c: &mut Criterion) {
    match gpuworld::cpu_client(Driver::DeviceThread) {
        Ok(client) => bench_backend(c, "cpu", client),
        Err(error) => eprintln!("SKIPPED cpu: {error}"),
    }
    let mut cpus = gpuworld::CpuBackend::with_devices(2)
        .into_iter()
        .map(|b| ComputeClient::new(b, gpuworld::RuntimeConfig::default(), Driver::DeviceThread));
    if let (Some(a), Some(b)) = (cpus.next(), cpus.next()) {
        bench_split(c, "cpu", [a, b]);
    }
    #[cfg(feature = "wgpu")]
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => {
            bench_backend(c, "wgpu", client);
            raw_wgpu_step::bench(c);
        }
        Err(error) => eprintln!("SKIPPED wgpu: no adapter: {error}"),
    }
    #[cfg(feature = "cuda")]
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => {
            bench_backend(c, "cuda", client.clone());
            raw_cuda::bench(c, &client);
            let config = |device| gpuworld::CudaConfig::default().with_device(device);
            match gpuworld::cuda_client(config(0)) {
                Ok(other) => bench_split(c, "cuda_one_gpu", [client.clone(), other]),
                Err(error) => eprintln!("SKIPPED cuda split on one GPU: {error}"),
            }
            match gpuworld::cuda_client(config(1)) {
                Ok(other) => bench_split(c, "cuda_two_gpus", [client, other]),
                Err(error) => eprintln!("SKIPPED cuda split on two GPUs: {error}"),
            }
        }
        Err(error) => eprintln!("SKIPPED cuda: {error}"),
    }
}

#[cfg(feature = "cuda")]
#[path = "common/raw_cuda.rs"]
mod raw_driver;

#[cfg(feature = "wgpu")]
#[path = "common/raw_wgpu.rs"]
mod raw_wgpu;

/// The raw side on CUDA: the same `ADD` launched by hand, in a loop and as a CUDA graph.
#[cfg(feature = "cuda")]
mod raw_cuda {
    use super::{FLOATS, kernels};
    use criterion::{Criterion, Throughput};
    use gpuworld::cudarc::driver::sys;
    use gpuworld::library;
    use std::ffi::c_void;

    use super::raw_driver::check;

    struct Raw {
        stream: sys::CUstream,
        add: sys::CUfunction,
        x: sys::CUdeviceptr,
        ones: sys::CUdeviceptr,
    }

    impl Raw {
        /// Device 0's primary context (gpuworld opened it: the driver loads), `ADD`, buffers.
        fn new() -> Raw {
            let (mut x, mut ones) = (0, 0);
            // SAFETY: two allocations of FLOATS floats; they live for the process.
            unsafe {
                check(sys::cuMemAlloc_v2(&mut x, FLOATS * 4), "alloc");
                check(sys::cuMemAlloc_v2(&mut ones, FLOATS * 4), "alloc");
            }
            let raw = Raw::over(x, ones);
            raw.set_buffers();
            raw
        }

        /// Sets `x` to zeros and `ones` to ones (buffers of the raw side's own).
        fn set_buffers(&self) {
            // SAFETY: both pointers hold FLOATS floats.
            unsafe {
                check(sys::cuMemsetD32_v2(self.x, 0, FLOATS), "zero");
                check(
                    sys::cuMemsetD32_v2(self.ones, 1.0f32.to_bits(), FLOATS),
                    "ones",
                );
            }
        }

        /// The same over `x` (zeros) and `ones`, device pointers of FLOATS floats each that
        /// outlive it.
        fn over(x: sys::CUdeviceptr, ones: sys::CUdeviceptr) -> Raw {
            // SAFETY: plain driver calls on the primary context, each checked; what is made
            // here lives for the process.
            unsafe {
                let add = super::raw_driver::load_kernels(&[&library::ADD])[0];
                let mut stream = std::ptr::null_mut();
                let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
                check(sys::cuStreamCreate(&mut stream, flags), "stream");
                Raw {
                    stream,
                    add,
                    x,
                    ones,
                }
            }
        }

        /// `x += ones` on the stream (captured when the stream captures).
        fn launch(&self) {
            let (mut a, mut b, mut out) = (self.x, self.ones, self.x);
            let mut len = FLOATS as u32;
            let (mut len_b, mut len_out) = (len, len);
            let mut params: [*mut c_void; 6] = [
                (&mut a as *mut u64).cast(),
                (&mut len as *mut u32).cast(),
                (&mut b as *mut u64).cast(),
                (&mut len_b as *mut u32).cast(),
                (&mut out as *mut u64).cast(),
                (&mut len_out as *mut u32).cast(),
            ];
            let [bx, by, bz] = library::ADD.signature.cube_dim;
            // SAFETY: `add`'s parameters are (pointer, length) per buffer, as `params` holds;
            // the buffers hold FLOATS floats.
            let code = unsafe {
                sys::cuLaunchKernel(
                    self.add,
                    FLOATS.div_ceil(256) as u32,
                    1,
                    1,
                    bx,
                    by,
                    bz,
                    0,
                    self.stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            check(code, "cuLaunchKernel");
        }

        fn sync(&self) {
            // SAFETY: a live stream.
            check(unsafe { sys::cuStreamSynchronize(self.stream) }, "sync");
        }

        /// A CUDA graph of `k` launches.
        fn graph(&self, k: usize) -> sys::CUgraphExec {
            // SAFETY: capture of this stream's launches, ended before any other use.
            unsafe {
                let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
                check(sys::cuStreamBeginCapture_v2(self.stream, mode), "capture");
                for _ in 0..k {
                    self.launch();
                }
                let mut graph = std::ptr::null_mut();
                check(
                    sys::cuStreamEndCapture(self.stream, &mut graph),
                    "end capture",
                );
                let mut exec = std::ptr::null_mut();
                check(
                    sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0),
                    "instantiate",
                );
                exec
            }
        }

        fn first(&self) -> f32 {
            let mut value = 0f32;
            // SAFETY: reads 4 bytes of `x` into `value`, after the stream's work.
            unsafe {
                self.sync();
                check(
                    sys::cuMemcpyDtoH_v2((&mut value as *mut f32).cast(), self.x, 4),
                    "read",
                );
            }
            value
        }
    }

    /// Times one launch of `exec`, `raw`'s graph of `k` launches, then its sync, as `name`;
    /// counts the kernels it ran into `issued`.
    fn time_graph(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: String,
        raw: &Raw,
        exec: sys::CUgraphExec,
        k: usize,
        issued: &mut u64,
    ) {
        group.bench_function(name, |b| {
            b.iter(|| {
                // SAFETY: an executable of this context on its stream, over buffers that
                // outlive it.
                check(unsafe { sys::cuGraphLaunch(exec, raw.stream) }, "launch");
                raw.sync();
                *issued += k as u64;
            })
        });
    }

    /// The raw loop and graph over buffers of their own, then the raw graph over two buffers of
    /// `client`'s pool (its handles' device pointers): what the buffers' placement costs.
    pub fn bench(c: &mut Criterion, client: &gpuworld::ComputeClient<gpuworld::CudaBackend>) {
        let raw = Raw::new();
        let mut group = super::bench_group(c, "graph/cuda_raw");
        let mut issued = 0u64;
        for k in kernels() {
            group.throughput(Throughput::Elements(k as u64));
            group.bench_function(format!("loop/{k}"), |b| {
                b.iter(|| {
                    for _ in 0..k {
                        raw.launch();
                    }
                    raw.sync();
                    issued += k as u64;
                })
            });
            let start = std::time::Instant::now();
            let exec = raw.graph(k);
            eprintln!(
                "graph/cuda_raw/{k}: capture and instantiate {:.1} µs",
                start.elapsed().as_secs_f64() * 1e6
            );
            time_graph(&mut group, format!("graph/{k}"), &raw, exec, k, &mut issued);
        }
        group.finish();
        assert_eq!(raw.first() as u64, issued, "every raw kernel ran once");
        let x = client.create_from_pod(&[0.0f32; FLOATS]);
        let ones = client.create_from_pod(&[1.0f32; FLOATS]);
        let pointer = |handle: &gpuworld::Handle| {
            let guard = client.get_resource(handle).expect("a live handle");
            guard.resource().expect("CUDA gives a device pointer")
        };
        let pooled = Raw::over(pointer(&x), pointer(&ones));
        let mut group = super::bench_group(c, "graph/cuda_raw_pool");
        let mut issued = 0u64;
        for k in kernels() {
            group.throughput(Throughput::Elements(k as u64));
            let exec = pooled.graph(k);
            time_graph(
                &mut group,
                format!("graph/{k}"),
                &pooled,
                exec,
                k,
                &mut issued,
            );
        }
        group.finish();
        assert_eq!(pooled.first() as u64, issued, "every raw kernel ran once");
        eprintln!(
            "graph/cuda_raw_pool: x at {:#x}, ones at {:#x}",
            pointer(&x),
            pointer(&ones)
        );
        drop((x, ones));
        placements(c);
    }

    /// `GPUWORLD_GRAPH_PLACEMENTS=1024,4096,...`: the raw graph over `x` and `ones` at these
    /// distances (from start to start) within one allocation of their own. A distance below a
    /// buffer's size (1 KiB) would overlap them, and is refused.
    fn placements(c: &mut Criterion) {
        let Ok(list) = std::env::var("GPUWORLD_GRAPH_PLACEMENTS") else {
            return;
        };
        let mut group = super::bench_group(c, "graph/cuda_raw_apart");
        for gap in list
            .split(',')
            .map(|g| g.trim().parse::<usize>().expect("bytes"))
        {
            assert!(
                gap >= FLOATS * 4,
                "GPUWORLD_GRAPH_PLACEMENTS: {gap} bytes would overlap buffers of {} bytes",
                FLOATS * 4
            );
            let mut base = 0;
            // SAFETY: one allocation holding both buffers at `gap` apart; it lives for the
            // process.
            check(
                unsafe { sys::cuMemAlloc_v2(&mut base, gap + FLOATS * 4) },
                "alloc",
            );
            let raw = Raw::over(base, base + gap as u64);
            raw.set_buffers();
            let mut issued = 0u64;
            for k in kernels() {
                let exec = raw.graph(k);
                time_graph(&mut group, format!("{gap}/{k}"), &raw, exec, k, &mut issued);
            }
            assert_eq!(raw.first() as u64, issued, "every raw kernel ran once");
        }
        group.finish();
    }
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, graphs);
}
criterion_main!(group::benches);

/// The raw side on wgpu: the same step as one compute pass of `k` dispatches of a hand-written
/// `x += ones` (one pipeline, one bind group), submitted and waited for. Its WGSL stays
/// hand-written: it is the baseline of wgpu without gpuworld, so nothing of gpuworld's (the
/// macro's text included) may be in it.
#[cfg(feature = "wgpu")]
mod raw_wgpu_step {
    use super::{FLOATS, kernels};
    use criterion::{Criterion, Throughput};
    use gpuworld::wgpu;

    const ADD_IN_PLACE: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> ones: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) { x[id.x] = x[id.x] + ones[id.x]; }
}
";

    struct Raw {
        device: wgpu::Device,
        queue: wgpu::Queue,
        pipeline: wgpu::ComputePipeline,
        group: wgpu::BindGroup,
        x: wgpu::Buffer,
    }

    impl Raw {
        fn new() -> Option<Raw> {
            let (device, queue, pipeline) = super::raw_wgpu::device_and_pipeline(ADD_IN_PLACE)?;
            let storage = |label, contents: f32| {
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: (FLOATS * 4) as u64,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&[contents; FLOATS]));
                buffer
            };
            let (x, ones) = (storage("x", 0.0), storage("ones", 1.0));
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: x.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: ones.as_entire_binding(),
                    },
                ],
            });
            Some(Raw {
                device,
                queue,
                pipeline,
                group,
                x,
            })
        }

        /// One step: `k` dispatches in one pass, submitted, waited for.
        fn step(&self, k: usize) {
            super::raw_wgpu::one_pass(
                &self.device,
                &self.queue,
                &self.pipeline,
                &self.group,
                k as u64,
                FLOATS.div_ceil(256) as u32,
            );
        }

        /// `x[0]`, read back through a mapped copy.
        fn first(&self) -> f32 {
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            encoder.copy_buffer_to_buffer(&self.x, 0, &staging, 0, 4);
            self.queue.submit([encoder.finish()]);
            staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .expect("the copy completes");
            bytemuck::cast_slice::<u8, f32>(
                &staging
                    .slice(..)
                    .get_mapped_range()
                    .expect("mapped after the wait"),
            )[0]
        }
    }

    pub fn bench(c: &mut Criterion) {
        let Some(raw) = Raw::new() else {
            eprintln!("SKIPPED raw wgpu: no adapter");
            return;
        };
        let mut group = super::bench_group(c, "graph/wgpu_raw");
        let mut issued = 0u64;
        for k in kernels() {
            group.throughput(Throughput::Elements(k as u64));
            group.bench_function(format!("one_pass/{k}"), |b| {
                b.iter(|| {
                    raw.step(k);
                    issued += k as u64;
                })
            });
        }
        group.finish();
        assert_eq!(raw.first() as u64, issued, "every raw dispatch ran once");
    }
}

//! The cuda backend against raw CUDA driver calls (cudarc's `sys`) in the same process, on device
//! 0: empty-kernel launch throughput (device thread), 256 MiB host-to-device (from staging and
//! from pageable memory) and device-to-host copies, a cached allocation against cuMemAllocAsync +
//! cuMemFreeAsync, and 4 streams of busy kernels against the same kernels on 1 stream. Without a
//! CUDA driver it prints a SKIPPED line and exits cleanly.

use criterion::{Criterion, Throughput};
use gpuworld::cudarc::driver::sys;
use gpuworld::{
    Bindings, ComputeClient, CubeCount, CudaBackend, CudaConfig, Driver, KernelDef, RuntimeConfig,
    SchedulingStrategy, StreamId, library,
};
use std::ffi::CString;
use std::time::Duration;

/// Launches per sample of the launch benchmark.
const LAUNCHES: u64 = 2000;
/// Bytes per copy of the bandwidth benchmark.
const COPY_BYTES: usize = 256 << 20;
/// Allocations per sample of the allocation benchmark.
const ALLOCATIONS: u64 = 200;
/// Bytes per allocation.
const ALLOCATION_BYTES: usize = 1 << 20;
/// Busy kernels per stream in the overlap benchmark, and the clock cycles each one spins.
const SPINS_PER_STREAM: u64 = 50;
const SPIN_CYCLES: u32 = 100_000;

/// One block of 32 threads spinning for `s0` cycles: a kernel that leaves most of the GPU idle.
static SPIN: KernelDef = KernelDef {
    id: "bench.cuda.spin",
    name: "spin",
    cube_dim: [32, 1, 1],
    buffers: 1,
    scalars: 1,
    cpu: None,
    wgsl: None,
    cuda: Some(SPIN_SOURCE),
};

const SPIN_SOURCE: &str = r#"
extern "C" __global__ void spin(unsigned int* b0, unsigned int n0, unsigned int s0 GW_COUNT_PARAM) {
    GW_FOR_EACH_CUBE {
        const long long start = clock64();
        while (clock64() - start < (long long)s0) {}
        if (threadIdx.x == 0 && GW_IN_BOUNDS(GW_CUBE_INDEX, n0)) b0[GW_CUBE_INDEX] = 1u;
    }
}
"#;

/// Raw CUDA on the primary context of device 0: streams, the noop and spin kernels, pinned memory.
struct Raw {
    streams: Vec<sys::CUstream>,
    noop: sys::CUfunction,
    spin: sys::CUfunction,
    pinned: *mut u8,
    device_buffer: sys::CUdeviceptr,
    flag: sys::CUdeviceptr,
}

fn check(code: sys::CUresult, what: &str) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{what}");
}

impl Raw {
    /// Opens the primary context (gpuworld made sure the driver loads) and loads the kernels.
    fn new() -> Raw {
        // SAFETY: the bench's raw side: plain driver calls on the primary context, each checked;
        // everything made here lives for the whole process.
        unsafe {
            let mut device = 0;
            check(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
            let mut context = std::ptr::null_mut();
            check(
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
                "retain",
            );
            check(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent");
            let source = format!(
                "{}\n{}\n{}",
                gpuworld::library::cuda::PRELUDE,
                library::NOOP.cuda.unwrap_or_default(),
                SPIN_SOURCE
            );
            let ptx = gpuworld::cudarc::nvrtc::compile_ptx(source).expect("NVRTC compiles");
            let image = CString::new(ptx.to_src()).expect("PTX has no NUL");
            let mut module = std::ptr::null_mut();
            check(
                sys::cuModuleLoadData(&mut module, image.as_ptr().cast()),
                "load",
            );
            let mut noop = std::ptr::null_mut();
            check(
                sys::cuModuleGetFunction(&mut noop, module, c"noop".as_ptr()),
                "noop",
            );
            let mut spin = std::ptr::null_mut();
            check(
                sys::cuModuleGetFunction(&mut spin, module, c"spin".as_ptr()),
                "spin",
            );
            let streams = (0..4)
                .map(|_| {
                    let mut stream = std::ptr::null_mut();
                    let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
                    check(sys::cuStreamCreate(&mut stream, flags), "stream");
                    stream
                })
                .collect();
            let mut pinned = std::ptr::null_mut();
            check(sys::cuMemHostAlloc(&mut pinned, COPY_BYTES, 0), "pinned");
            let mut device_buffer = 0;
            check(sys::cuMemAlloc_v2(&mut device_buffer, COPY_BYTES), "alloc");
            let mut flag = 0;
            check(sys::cuMemAlloc_v2(&mut flag, 4 * 1024), "alloc");
            Raw {
                streams,
                noop,
                spin,
                pinned: pinned.cast(),
                device_buffer,
                flag,
            }
        }
    }

    fn sync(&self, stream: usize) {
        // SAFETY: a stream made in `new`.
        check(
            unsafe { sys::cuStreamSynchronize(self.streams[stream]) },
            "sync",
        );
    }

    fn launch_noop(&self) {
        // SAFETY: noop takes no parameter (static count: GW_COUNT_PARAM_ONLY is empty).
        let code = unsafe {
            sys::cuLaunchKernel(
                self.noop,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.streams[0],
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(code, "launch noop");
    }

    fn launch_spin(&self, stream: usize) {
        let mut pointer = self.flag;
        let mut len = 1u32;
        let mut cycles = SPIN_CYCLES;
        let mut params = [
            (&mut pointer as *mut u64).cast::<std::ffi::c_void>(),
            (&mut len as *mut u32).cast(),
            (&mut cycles as *mut u32).cast(),
        ];
        // SAFETY: spin's parameters are (pointer, u32 length, u32 cycles); `flag` is live.
        let code = unsafe {
            sys::cuLaunchKernel(
                self.spin,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                self.streams[stream],
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(code, "launch spin");
    }

    fn copy_to_device(&self) {
        // SAFETY: both buffers hold COPY_BYTES.
        let code = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                self.device_buffer,
                self.pinned.cast(),
                COPY_BYTES,
                self.streams[0],
            )
        };
        check(code, "htod");
        self.sync(0);
    }

    /// The same copy from pageable memory, which the driver stages itself.
    fn copy_pageable_to_device(&self, data: &[u8]) {
        // SAFETY: `data` and the device buffer hold COPY_BYTES.
        let code = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                self.device_buffer,
                data.as_ptr().cast(),
                COPY_BYTES,
                self.streams[0],
            )
        };
        check(code, "pageable htod");
        self.sync(0);
    }

    fn copy_to_host(&self) {
        // SAFETY: both buffers hold COPY_BYTES.
        let code = unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.pinned.cast(),
                self.device_buffer,
                COPY_BYTES,
                self.streams[0],
            )
        };
        check(code, "dtoh");
        self.sync(0);
    }

    fn allocate_and_free(&self) {
        for _ in 0..ALLOCATIONS {
            let mut pointer = 0;
            // SAFETY: a stream-ordered allocation freed right after on the same stream.
            unsafe {
                check(
                    sys::cuMemAllocAsync(&mut pointer, ALLOCATION_BYTES, self.streams[0]),
                    "cuMemAllocAsync",
                );
                check(
                    sys::cuMemFreeAsync(pointer, self.streams[0]),
                    "cuMemFreeAsync",
                );
            }
        }
        self.sync(0);
    }
}

fn launch_throughput(
    c: &mut Criterion,
    client: &ComputeClient<CudaBackend>,
    batched: &ComputeClient<CudaBackend>,
    raw: &Raw,
) {
    let mut group = c.benchmark_group("cuda/launch_empty");
    group.throughput(Throughput::Elements(LAUNCHES));
    let runs = [
        ("gpuworld_device_thread", client),
        ("gpuworld_device_thread_max_tasks_16", batched),
    ];
    for (name, client) in runs {
        group.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..LAUNCHES {
                    client
                        .launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())
                        .expect("noop launches");
                }
                client.sync().expect("sync");
            });
        });
    }
    group.bench_function("raw_cuLaunchKernel", |b| {
        b.iter(|| {
            for _ in 0..LAUNCHES {
                raw.launch_noop();
            }
            raw.sync(0);
        });
    });
    group.finish();
}

fn bandwidth(c: &mut Criterion, client: &ComputeClient<CudaBackend>, raw: &Raw) {
    let data = vec![7u8; COPY_BYTES];
    let handle = client.empty(COPY_BYTES as u64);
    let mut group = c.benchmark_group("cuda/copy_256MiB");
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    group.bench_function("gpuworld_write_h2d", |b| {
        b.iter(|| {
            client.write(&handle, &data).expect("write");
            client.sync().expect("sync");
        });
    });
    group.bench_function("gpuworld_staged_write_h2d", |b| {
        b.iter(|| {
            let staging = client
                .reserve_staging(&[COPY_BYTES])
                .pop()
                .expect("staging");
            client.write_bytes(&handle, staging).expect("write");
            client.sync().expect("sync");
        });
    });
    group.bench_function("gpuworld_create_from_slice_pinned_h2d", |b| {
        b.iter(|| {
            let created = client.create_from_slice_pinned(&data);
            client.sync().expect("sync");
            created
        });
    });
    group.bench_function("gpuworld_create_from_slice_h2d", |b| {
        b.iter(|| {
            let created = client.create_from_slice(&data);
            client.sync().expect("sync");
            created
        });
    });
    group.bench_function("gpuworld_read_d2h", |b| {
        b.iter(|| client.read_one(&handle).expect("read"));
    });
    group.bench_function("raw_pinned_h2d", |b| b.iter(|| raw.copy_to_device()));
    group.bench_function("raw_pageable_h2d", |b| {
        b.iter(|| raw.copy_pageable_to_device(&data))
    });
    group.bench_function("raw_pinned_d2h", |b| b.iter(|| raw.copy_to_host()));
    group.finish();
}

fn allocation(c: &mut Criterion, client: &ComputeClient<CudaBackend>, raw: &Raw) {
    let mut group = c.benchmark_group("cuda/allocate_1MiB");
    group.throughput(Throughput::Elements(ALLOCATIONS));
    group.bench_function("gpuworld_pool", |b| {
        b.iter(|| {
            for _ in 0..ALLOCATIONS {
                drop(client.empty(ALLOCATION_BYTES as u64));
            }
            // A blocking call: returns once the device thread ingested every create and release.
            client.memory_usage()
        });
    });
    group.bench_function("raw_cuMemAllocAsync_free", |b| {
        b.iter(|| raw.allocate_and_free())
    });
    group.finish();
}

fn overlap(c: &mut Criterion, client: &ComputeClient<CudaBackend>, raw: &Raw) {
    let streams: Vec<ComputeClient<CudaBackend>> = (0..4)
        .map(|_| {
            let id = std::thread::spawn(StreamId::current)
                .join()
                .expect("a stream id");
            client.with_stream(id)
        })
        .collect();
    let flags: Vec<_> = streams.iter().map(|s| s.empty(4)).collect();
    let spin = |s: usize| {
        streams[s]
            .launch(
                &SPIN,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&flags[s]).scalar_u32(SPIN_CYCLES),
            )
            .expect("spin launches");
    };
    let mut group = c.benchmark_group("cuda/busy_kernels_x200");
    group.throughput(Throughput::Elements(4 * SPINS_PER_STREAM));
    group.bench_function("gpuworld_1_stream", |b| {
        b.iter(|| {
            for _ in 0..4 * SPINS_PER_STREAM {
                spin(0);
            }
            streams[0].sync().expect("sync");
        });
    });
    group.bench_function("gpuworld_4_streams", |b| {
        b.iter(|| {
            for _ in 0..SPINS_PER_STREAM {
                (0..4).for_each(spin);
            }
            streams.iter().for_each(|s| s.sync().expect("sync"));
        });
    });
    group.bench_function("raw_1_stream", |b| {
        b.iter(|| {
            for _ in 0..4 * SPINS_PER_STREAM {
                raw.launch_spin(0);
            }
            raw.sync(0);
        });
    });
    group.bench_function("raw_4_streams", |b| {
        b.iter(|| {
            for _ in 0..SPINS_PER_STREAM {
                (0..4).for_each(|s| raw.launch_spin(s));
            }
            (0..4).for_each(|s| raw.sync(s));
        });
    });
    group.finish();
}

fn main() {
    let client = match gpuworld::cuda_client(CudaConfig::default()) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("SKIPPED: no CUDA driver: {error}");
            return;
        }
    };
    // Compile the library's noop through gpuworld first: it also loads NVRTC for the raw side.
    client
        .launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())
        .and_then(|()| client.sync())
        .expect("noop runs");
    // The same device thread, with tasks queued per stream up to 16 before they are submitted.
    let batched = match CudaBackend::new(CudaConfig::default()) {
        Ok(backend) => {
            let runtime = RuntimeConfig {
                max_tasks: 16,
                strategy: SchedulingStrategy::Interleave,
                ..RuntimeConfig::default()
            };
            ComputeClient::new(backend, runtime, Driver::DeviceThread)
        }
        Err(error) => {
            eprintln!("SKIPPED: no CUDA driver: {error}");
            return;
        }
    };
    let raw = Raw::new();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .configure_from_args();
    launch_throughput(&mut c, &client, &batched, &raw);
    bandwidth(&mut c, &client, &raw);
    allocation(&mut c, &client, &raw);
    overlap(&mut c, &client, &raw);
    c.final_summary();
}

//! Many devices on CUDA, through the public API beside the raw API in the same process:
//! `to_client` of 256 MiB between two clients of one GPU, cpu -> cuda and cuda -> cpu, against
//! raw staging through page-locked memory (`cuMemcpyDtoHAsync`/`cuMemcpyHtoDAsync`); a
//! single-rank `all_reduce` of 256 MiB f32 through the runtime against raw `ncclAllReduce`.
//! With two GPUs or more, also `to_client` GPU 0 -> GPU 1 against raw `cuMemcpyPeerAsync`, and a
//! two-rank `all_reduce` against raw NCCL, with nccl-tests' bus bandwidth
//! (`algbw = bytes / time`, `busbw = algbw * 2 (n - 1) / n`) printed to stderr at the end.
//! Without a CUDA driver (or NCCL, for its rows) it prints SKIPPED lines and exits cleanly.
//!
//! Run: `cargo bench --bench devices --features cuda -- --quick` on the GPU machine (build it
//! here with `../shared/tools/device-prep -- -p gpuworld --features cuda --bench devices`); NCCL
//! comes from `LD_LIBRARY_PATH` or `GPUWORLD_NCCL_LIB`.

use criterion::{Criterion, Throughput};
use gpuworld::collective::{ElemType, Group, ReduceOp};
use gpuworld::cudarc::driver::sys;
use gpuworld::cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t};
use gpuworld::{ComputeClient, CudaBackend, CudaConfig, Driver};
use std::time::{Duration, Instant};

/// Bytes per copy or collective.
const BYTES: usize = 256 << 20;

fn check(code: sys::CUresult, what: &str) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Raw CUDA on one device's primary context: a stream and two device buffers of `BYTES`.
struct RawDevice {
    context: sys::CUcontext,
    stream: sys::CUstream,
    a: sys::CUdeviceptr,
    b: sys::CUdeviceptr,
}

impl RawDevice {
    fn new(ordinal: i32) -> RawDevice {
        // SAFETY: the bench's raw side: plain driver calls on the primary context, each checked;
        // everything made here lives for the whole process.
        unsafe {
            let mut device = 0;
            check(sys::cuDeviceGet(&mut device, ordinal), "cuDeviceGet");
            let mut context = std::ptr::null_mut();
            check(
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
                "retain",
            );
            check(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent");
            let mut stream = std::ptr::null_mut();
            let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
            check(sys::cuStreamCreate(&mut stream, flags), "stream");
            let (mut a, mut b) = (0, 0);
            check(sys::cuMemAlloc_v2(&mut a, BYTES), "alloc");
            check(sys::cuMemAlloc_v2(&mut b, BYTES), "alloc");
            check(sys::cuMemsetD8Async(a, 1, BYTES, stream), "memset");
            check(sys::cuStreamSynchronize(stream), "sync");
            RawDevice {
                context,
                stream,
                a,
                b,
            }
        }
    }

    fn bind(&self) {
        // SAFETY: the retained primary context.
        check(unsafe { sys::cuCtxSetCurrent(self.context) }, "bind");
    }

    /// Waits for the stream; its context must be current.
    fn wait(&self) {
        // SAFETY: the stream made in `new`.
        check(unsafe { sys::cuStreamSynchronize(self.stream) }, "sync");
    }

    fn sync(&self) {
        self.bind();
        self.wait();
    }

    /// Queues a copy of buffer `a` into `pinned` on the stream; its context must be current.
    fn download_a(&self, pinned: Pinned) {
        // SAFETY: `a` and `pinned` each hold `BYTES`, and live for the process.
        let code =
            unsafe { sys::cuMemcpyDtoHAsync_v2(pinned.0.cast(), self.a, BYTES, self.stream) };
        check(code, "DtoH");
    }

    /// Queues a copy of `pinned` into buffer `b` on the stream; its context must be current.
    fn upload_b(&self, pinned: Pinned) {
        // SAFETY: `b` and `pinned` each hold `BYTES`, and live for the process.
        let code =
            unsafe { sys::cuMemcpyHtoDAsync_v2(self.b, pinned.0.cast(), BYTES, self.stream) };
        check(code, "HtoD");
    }
}

/// Page-locked host memory of `BYTES`, made by [`pinned`] and kept for the process.
#[derive(Clone, Copy)]
struct Pinned(*mut u8);

impl Pinned {
    /// Copies `host`, of `BYTES`, in.
    fn write(self, host: &[u8]) {
        assert_eq!(host.len(), BYTES);
        // SAFETY: both hold `BYTES`; pinned memory is no Rust allocation, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), self.0, BYTES) };
    }

    /// Copies everything out into `host`, of `BYTES`.
    fn read(self, host: &mut [u8]) {
        assert_eq!(host.len(), BYTES);
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.0, host.as_mut_ptr(), BYTES) };
    }
}

/// Page-locked host memory of `BYTES`, portable: page-locked for every context, whichever
/// device's context is current when it is made.
fn pinned() -> Pinned {
    let mut pinned = std::ptr::null_mut();
    // SAFETY: a plain checked allocation, kept for the process.
    check(
        unsafe { sys::cuMemHostAlloc(&mut pinned, BYTES, sys::CU_MEMHOSTALLOC_PORTABLE) },
        "pinned",
    );
    Pinned(pinned.cast())
}

fn cuda_client(device: usize) -> Option<ComputeClient<CudaBackend>> {
    match gpuworld::cuda_client(CudaConfig::default().with_device(device)) {
        Ok(client) => Some(client),
        Err(error) => {
            eprintln!("SKIPPED: no CUDA device {device}: {error}");
            None
        }
    }
}

fn to_client_rows(c: &mut Criterion, raw: &RawDevice, pinned: Pinned) {
    let (Some(a), Some(b)) = (cuda_client(0), cuda_client(0)) else {
        return;
    };
    let cpu = gpuworld::cpu_client(Driver::DeviceThread).expect("the configuration is readable");
    let host = vec![1u8; BYTES];
    let on_a = a.create_from_slice(&host);
    let on_cpu = cpu.create_from_slice(&host);
    a.sync().expect("upload");
    cpu.sync().expect("upload");
    let mut group = c.benchmark_group("devices/to_client");
    group.throughput(Throughput::Bytes(BYTES as u64));
    group.bench_function("cuda0_to_cuda0", |bench| {
        bench.iter(|| {
            let copy = a.to_client(&on_a, &b).expect("to_client");
            b.sync().expect("arrived");
            copy
        })
    });
    group.bench_function("raw_pinned_staging_cuda0_to_cuda0", |bench| {
        bench.iter(|| {
            raw.bind();
            raw.download_a(pinned);
            raw.wait();
            raw.upload_b(pinned);
            raw.sync();
        })
    });
    group.bench_function("cpu_to_cuda0", |bench| {
        bench.iter(|| {
            let copy = cpu.to_client(&on_cpu, &a).expect("to_client");
            a.sync().expect("arrived");
            copy
        })
    });
    group.bench_function("raw_pinned_staging_host_to_cuda0", |bench| {
        bench.iter(|| {
            pinned.write(&host);
            raw.bind();
            raw.upload_b(pinned);
            raw.sync();
        })
    });
    group.bench_function("cuda0_to_cpu", |bench| {
        bench.iter(|| {
            let copy = a.to_client(&on_a, &cpu).expect("to_client");
            cpu.sync().expect("arrived");
            copy
        })
    });
    let mut back = vec![0u8; BYTES];
    group.bench_function("raw_pinned_staging_cuda0_to_host", |bench| {
        bench.iter(|| {
            raw.bind();
            raw.download_a(pinned);
            raw.sync();
            pinned.read(&mut back);
        })
    });
    group.finish();
}

/// Times `f` `n` times after one warm-up and returns the median.
fn median_of(n: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

/// nccl-tests' bandwidths of an all_reduce of `bytes` over `ranks` ranks in `time`, in GB/s.
fn bandwidths(bytes: usize, ranks: usize, time: Duration) -> (f64, f64) {
    let algbw = bytes as f64 / time.as_secs_f64() / 1e9;
    let busbw = algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64;
    (algbw, busbw)
}

fn all_reduce_rows(c: &mut Criterion, raws: &[RawDevice], report: &mut Vec<String>) {
    let nccl = match gpuworld_cuda::nccl() {
        Ok(nccl) => nccl,
        Err(error) => {
            eprintln!("SKIPPED all_reduce rows: {error}");
            return;
        }
    };
    let count = BYTES / 4;
    for ranks in [1, 2] {
        if raws.len() < ranks {
            eprintln!("SKIPPED {ranks}-rank all_reduce: {} GPU(s)", raws.len());
            continue;
        }
        let clients: Option<Vec<_>> = (0..ranks).map(cuda_client).collect();
        let Some(clients) = clients else { return };
        let group = Group::new(clients).expect("distinct devices");
        let buffers: Vec<_> = group
            .clients()
            .iter()
            .map(|c| c.create_from_slice(&vec![0u8; BYTES]))
            .collect();
        let bindings: Vec<_> = buffers.iter().map(|h| h.binding()).collect();
        let devices: Vec<u32> = (0..ranks as u32).collect();
        let comms = gpuworld_cuda::communicators(&devices).expect("NCCL communicators");
        let raw_once = || {
            gpuworld_cuda::grouped(|| {
                for (raw, comm) in raws.iter().zip(&comms) {
                    raw.bind();
                    // SAFETY: `raw.a` holds `count` f32 on the communicator's device.
                    unsafe {
                        nccl.raw_all_reduce(
                            raw.a,
                            raw.a,
                            count,
                            ncclDataType_t::ncclFloat32,
                            ncclRedOp_t::ncclSum,
                            comm,
                            raw.stream.cast(),
                        )
                    }
                    .expect("ncclAllReduce");
                }
            })
            .expect("NCCL group");
            for raw in &raws[..ranks] {
                raw.sync();
            }
        };
        let ours_once = || {
            group
                .all_reduce(&bindings, ElemType::F32, ReduceOp::Sum)
                .expect("all_reduce");
            group.sync_collective().expect("all_reduce ran");
        };
        let mut bench = c.benchmark_group("devices/all_reduce");
        bench.throughput(Throughput::Bytes(BYTES as u64));
        bench.bench_function(format!("{ranks}_rank_f32"), |b| b.iter(ours_once));
        bench.bench_function(format!("raw_nccl_{ranks}_rank_f32"), |b| b.iter(raw_once));
        bench.finish();
        for (name, time) in [
            ("gpuworld", median_of(10, ours_once)),
            ("raw NCCL", median_of(10, raw_once)),
        ] {
            let (algbw, busbw) = bandwidths(BYTES, ranks, time);
            report.push(format!(
                "all_reduce {ranks} rank(s) 256 MiB f32, {name}: {:.3} ms, algbw {algbw:.1} GB/s, busbw {busbw:.1} GB/s",
                time.as_secs_f64() * 1e3
            ));
        }
    }
}

fn peer_rows(c: &mut Criterion, raws: &[RawDevice]) {
    if raws.len() < 2 {
        eprintln!("SKIPPED peer copy rows: {} GPU(s)", raws.len());
        return;
    }
    let (Some(a), Some(b)) = (cuda_client(0), cuda_client(1)) else {
        return;
    };
    let on_a = a.create_from_slice(&vec![1u8; BYTES]);
    a.sync().expect("upload");
    let mut group = c.benchmark_group("devices/peer_copy");
    group.throughput(Throughput::Bytes(BYTES as u64));
    group.bench_function("to_client_cuda0_to_cuda1", |bench| {
        bench.iter(|| {
            let copy = a.to_client(&on_a, &b).expect("to_client");
            b.sync().expect("arrived");
            copy
        })
    });
    let (src, dst) = (&raws[0], &raws[1]);
    group.bench_function("raw_cuMemcpyPeerAsync_cuda0_to_cuda1", |bench| {
        bench.iter(|| {
            dst.bind();
            // SAFETY: buffers of `BYTES` on each device, contexts retained.
            unsafe {
                check(
                    sys::cuMemcpyPeerAsync(
                        dst.b,
                        dst.context,
                        src.a,
                        src.context,
                        BYTES,
                        dst.stream,
                    ),
                    "cuMemcpyPeerAsync",
                );
            }
            dst.sync();
        })
    });
    group.finish();
}

fn main() {
    let count = match gpuworld_cuda::device_count() {
        Ok(count) if count > 0 => count,
        Ok(_) => {
            eprintln!("SKIPPED: the CUDA driver sees no device");
            return;
        }
        Err(error) => {
            eprintln!("SKIPPED: no CUDA driver: {error}");
            return;
        }
    };
    // Opening the clients first makes sure the driver loads before the raw side's calls.
    let Some(_first) = cuda_client(0) else { return };
    let raws: Vec<RawDevice> = (0..count.min(2) as i32).map(RawDevice::new).collect();
    let pinned = pinned();
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut report = Vec::new();
    to_client_rows(&mut c, &raws[0], pinned);
    all_reduce_rows(&mut c, &raws, &mut report);
    peer_rows(&mut c, &raws);
    c.final_summary();
    for line in report {
        eprintln!("{line}");
    }
}

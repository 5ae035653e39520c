//! The cuda backend against raw CUDA driver calls (cudarc's `sys`) in the same process, on device
//! 0: empty-kernel launch throughput (device thread), 256 MiB host-to-device (from staging and
//! from pageable memory) and device-to-host copies, a cached allocation against
//! cuMemAllocAsync + cuMemFreeAsync, and 4 streams of busy kernels against the same kernels on
//! 1 stream. Then the public-API rows of issue 11
//! (`common/client_rows.rs`, at the issue's sizes) through the device-thread client, the round
//! trip also with the manual driver, beside their raw counterparts: pinned DtoH of 256 MiB,
//! pageable `cuMemcpyHtoD` of 256 MiB from a `Vec`, and a launch + 4-byte DtoH on one stream;
//! a table of every row's time and memory goes to stderr at the end. Without a CUDA driver it
//! prints a SKIPPED line and exits cleanly.
//!
//! Run: `cargo bench --bench cuda --features cuda -- --quick` on the GPU machine (build it here
//! with `../shared/tools/device-prep -- -p gpuworld --features cuda --bench cuda`); a filter
//! such as `client/` or `round_trip` runs only those rows.

#[path = "common/client_rows.rs"]
mod client_rows;
#[path = "common/raw_cuda.rs"]
mod raw_cuda;

use client_rows::{Shape, Summary};
use criterion::{Criterion, Throughput};
use gpuworld::cudarc::driver::sys;
use gpuworld::kernel::{Param, Signature};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, CudaBackend, CudaConfig, CudaSource, Driver, KernelDef,
    RuntimeConfig, SchedulingStrategy, StreamId, library,
};
use raw_cuda::check;
use std::time::{Duration, Instant};

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

/// One block of 32 threads spinning for `cycles` cycles: a kernel that leaves most of the GPU
/// idle. Hand-written CUDA C because it reads the device clock (`clock64()`), which the kernel
/// subset has no built-in for.
static SPIN: KernelDef = KernelDef {
    id: "bench.cuda.spin",
    name: "spin",
    signature: Signature {
        buffers: &[Param::u32("marks")],
        scalars: &[Param::u32("cycles")],
        cube_dim: [32, 1, 1],
    },
    sources: &[&CudaSource(
        r#"
extern "C" __global__ void spin(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const long long start = clock64();
        while (clock64() - start < (long long)cycles) {}
        if (threadIdx.x == 0 && GW_IN_BOUNDS(GW_CUBE_INDEX, marks_len)) marks[GW_CUBE_INDEX] = 1u;
    }
}
"#,
    )],
};

/// Raw CUDA on the primary context of device 0: streams, the noop and spin kernels, pinned memory.
struct Raw {
    streams: Vec<sys::CUstream>,
    noop: sys::CUfunction,
    spin: sys::CUfunction,
    pinned: *mut u8,
    device_buffer: sys::CUdeviceptr,
    flag: sys::CUdeviceptr,
    /// An event with timing enabled and one without, for the round trip's anatomy.
    timed_event: sys::CUevent,
    untimed_event: sys::CUevent,
}

impl Raw {
    /// Opens the primary context (gpuworld made sure the driver loads) and loads the kernels.
    fn new() -> Raw {
        // SAFETY: the bench's raw side: plain driver calls on the primary context, each checked;
        // everything made here lives for the whole process.
        unsafe {
            let [noop, spin] = raw_cuda::load_kernels(&[&library::NOOP, &SPIN])[..] else {
                unreachable!("two kernels asked, two loaded")
            };
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
            let mut timed_event = std::ptr::null_mut();
            let timed = sys::CUevent_flags::CU_EVENT_DEFAULT as u32;
            check(sys::cuEventCreate(&mut timed_event, timed), "event");
            let mut untimed_event = std::ptr::null_mut();
            let untimed = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            check(sys::cuEventCreate(&mut untimed_event, untimed), "event");
            Raw {
                streams,
                noop,
                spin,
                pinned: pinned.cast(),
                device_buffer,
                flag,
                timed_event,
                untimed_event,
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

    /// Pageable host-to-device: a synchronous copy of `data` (a `Vec`'s bytes) into the device
    /// buffer, as `cuMemcpyHtoD` stages it itself.
    fn copy_pageable_to_device(&self, data: &[u8]) {
        // SAFETY: `data` holds COPY_BYTES readable bytes; the device buffer holds COPY_BYTES.
        let code =
            unsafe { sys::cuMemcpyHtoD_v2(self.device_buffer, data.as_ptr().cast(), data.len()) };
        check(code, "pageable htod");
    }

    /// One noop launch and a 4-byte copy back on the same stream, then a stream sync.
    fn launch_and_read_word(&self) {
        self.launch_noop();
        // SAFETY: `pinned` holds COPY_BYTES, `flag` 4 KiB; the copy is ordered after the launch.
        let code =
            unsafe { sys::cuMemcpyDtoHAsync_v2(self.pinned.cast(), self.flag, 4, self.streams[0]) };
        check(code, "dtoh 4 B");
        self.sync(0);
    }

    /// The round trip as an event-driven runtime does it: launch, copy, record an event after
    /// them, and poll the event until it passed.
    fn launch_and_read_word_by_event(&self, timed: bool) {
        self.launch_noop();
        let event = if timed {
            self.timed_event
        } else {
            self.untimed_event
        };
        // SAFETY: as in `launch_and_read_word`; the event was made in `new`.
        unsafe {
            let code = sys::cuMemcpyDtoHAsync_v2(self.pinned.cast(), self.flag, 4, self.streams[0]);
            check(code, "dtoh 4 B");
            check(sys::cuEventRecord(event, self.streams[0]), "record");
            while sys::cuEventQuery(event) == sys::CUresult::CUDA_ERROR_NOT_READY {
                std::hint::spin_loop();
            }
        }
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
            // Returns once a tick ingested every create and release.
            client.sync().expect("sync");
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

/// The raw counterparts of the client rows that have one, as lines of the same summary.
fn raw_rows(c: &mut Criterion, raw: &Raw, shape: Shape, summary: &mut Summary) {
    let label = "cuda raw";
    let mut group = client_rows::group(c, label);
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    let mut d2h = Vec::new();
    group.bench_function("pinned_dtoh_256MiB", |b| {
        b.iter_custom(|iters| timed(iters, &mut d2h, || raw.copy_to_host()))
    });
    let data = vec![7u8; COPY_BYTES];
    let mut h2d = Vec::new();
    group.bench_function("pageable_htod_256MiB", |b| {
        b.iter_custom(|iters| timed(iters, &mut h2d, || raw.copy_pageable_to_device(&data)))
    });
    group.finish();
    if !d2h.is_empty() {
        let time = client_rows::median(&mut d2h);
        client_rows::emit(
            "cuda raw/pinned_dtoh_256MiB_gbps",
            client_rows::gb_s(COPY_BYTES, time),
        );
        let rate = client_rows::gb_per_s(COPY_BYTES, time);
        summary.add(
            label,
            "pinned cuMemcpyDtoHAsync of 256.00 MiB",
            rate,
            "-".into(),
        );
    }
    if !h2d.is_empty() {
        let time = client_rows::median(&mut h2d);
        client_rows::emit(
            "cuda raw/pageable_htod_256MiB_gbps",
            client_rows::gb_s(COPY_BYTES, time),
        );
        let rate = client_rows::gb_per_s(COPY_BYTES, time);
        summary.add(
            label,
            "pageable cuMemcpyHtoD of 256.00 MiB",
            rate,
            "-".into(),
        );
    }

    let mut group = client_rows::group(c, label);
    group.sample_size(30);
    let mut ran = false;
    group.bench_function("launch_noop_read_4B", |b| {
        ran = true;
        b.iter(|| raw.launch_and_read_word())
    });
    group.finish();
    if ran {
        let mut times: Vec<Duration> = (0..shape.round_trips)
            .map(|_| {
                let start = Instant::now();
                raw.launch_and_read_word();
                start.elapsed()
            })
            .collect();
        let median = client_rows::median(&mut times);
        summary.add(
            label,
            "cuLaunchKernel + cuMemcpyDtoHAsync 4 B + sync (median)",
            format!("{:.1} µs", median.as_secs_f64() * 1e6),
            "-".into(),
        );
    }
}

/// Where a round trip's time goes: the raw round trip with an event polled instead of a stream
/// sync (timed and untimed events), and through a manual client an idle tick, a read alone and a
/// launch with a sync.
fn round_trip_anatomy(c: &mut Criterion, manual: &ComputeClient<CudaBackend>, raw: &Raw) {
    let mut group = c.benchmark_group("anatomy");
    group.sample_size(30);
    group.bench_function("raw_launch_read_4B_timed_event", |b| {
        b.iter(|| raw.launch_and_read_word_by_event(true))
    });
    group.bench_function("raw_launch_read_4B_untimed_event", |b| {
        b.iter(|| raw.launch_and_read_word_by_event(false))
    });
    group.bench_function("manual_idle_tick", |b| b.iter(|| manual.tick()));
    let word = manual.empty(4);
    group.bench_function("manual_read_one_4B", |b| {
        b.iter(|| manual.read_one(&word).expect("read").len())
    });
    group.bench_function("manual_launch_sync", |b| {
        b.iter(|| {
            manual
                .launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())
                .and_then(|()| manual.sync())
                .expect("launch and sync")
        })
    });
    group.finish();
}

/// The round trip through each client and raw, taken in turn within one loop, so that a host
/// that slows down or speeds up during the run weighs on all alike: the medians and their ratios
/// to raw.
fn paired_round_trips(
    c: &mut Criterion,
    clients: &[(&str, &ComputeClient<CudaBackend>)],
    raw: &Raw,
    summary: &mut Summary,
) {
    let mut group = c.benchmark_group("paired");
    group.sample_size(10);
    let mut ran = false;
    group.bench_function("launch_noop_read_4B", |b| {
        ran = true;
        b.iter(|| raw.launch_and_read_word())
    });
    group.finish();
    if !ran {
        return;
    }
    let round_trip = |client: &ComputeClient<CudaBackend>, word: &gpuworld::Handle| {
        let start = Instant::now();
        client
            .launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())
            .expect("launch");
        let bytes = client.read_one(word).expect("read");
        let time = start.elapsed();
        drop(bytes);
        time
    };
    let words: Vec<_> = clients.iter().map(|(_, client)| client.empty(4)).collect();
    let n = clients.len();
    // Rounds in blocks: each block's medians give one ratio to raw, so the spread of the ratio
    // over the blocks of one process is printed beside the median of all rounds (a raw side
    // measured in another process ran at another speed: issue 52). Index 0 is raw.
    let mut blocks: Vec<Vec<Duration>> = Vec::new();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); n + 1];
    let mut block: Vec<Vec<Duration>> = vec![Vec::new(); n + 1];
    for round in 0..WARM_UP_ROUNDS + PAIRED_BLOCKS * BLOCK_ROUNDS {
        let start = Instant::now();
        raw.launch_and_read_word();
        let raw_time = start.elapsed();
        // The clients take turns going first, so that each also meets the longer gap since its
        // last round trip (the others in between), as a loop with host work in it would.
        // Warm-up rounds run the same loop and keep nothing; no allocation between rounds.
        let keep = round >= WARM_UP_ROUNDS;
        if keep {
            block[0].push(raw_time);
        }
        for k in 0..n {
            let i = (round + k) % n;
            let time = round_trip(clients[i].1, &words[i]);
            if keep {
                block[i + 1].push(time);
            }
        }
        if keep && block[0].len() == BLOCK_ROUNDS {
            for (all, kept) in times.iter_mut().zip(&block) {
                all.extend_from_slice(kept);
            }
            let medians = block.iter_mut().map(|t| client_rows::median(t)).collect();
            blocks.push(medians);
            block.iter_mut().for_each(Vec::clear);
        }
    }
    let medians: Vec<Duration> = times.iter_mut().map(|t| client_rows::median(t)).collect();
    let raw_median = medians[0];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    client_rows::emit("cuda raw/paired_round_trip_us", micros(raw_median));
    let raw_blocks = blocks.iter().map(|b| micros(b[0])).collect::<Vec<_>>();
    summary.add(
        "cuda raw",
        &format!("paired: cuLaunchKernel + cuMemcpyDtoHAsync 4 B + sync (median of {ROUNDS})"),
        format!("{:.1} µs", micros(raw_median)),
        format!("blocks of {BLOCK_ROUNDS}: {}", spread(&raw_blocks, "µs")),
    );
    for (index, ((label, _), median)) in
        clients.iter().zip(medians[1..].iter().copied()).enumerate()
    {
        let mut ratios: Vec<f64> = blocks
            .iter()
            .map(|b| micros(b[index + 1]) / micros(b[0]))
            .collect();
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
        client_rows::emit(&format!("{label}/paired_round_trip_us"), micros(median));
        client_rows::emit(&format!("{label}/paired_round_trip_x_raw"), ratio);
        if let (Some(low), Some(high)) = (ratios.first(), ratios.last()) {
            client_rows::emit(&format!("{label}/paired_round_trip_x_raw_min"), *low);
            client_rows::emit(&format!("{label}/paired_round_trip_x_raw_max"), *high);
        }
        summary.add(
            label,
            &format!("paired: launch NOOP + read_one 4 B (median of {ROUNDS})"),
            format!("{:.1} µs", micros(median)),
            format!(
                "{ratio:.2}x raw (median of {PAIRED_BLOCKS} blocks' ratios, {}; all rounds {:.2}x)",
                spread(&ratios, "x"),
                micros(median) / micros(raw_median)
            ),
        );
    }
}

/// Where a pageable upload of 256 MiB spends its time (issue 52: `create_from_slice` at 37-38
/// GB/s against a target of 40): the row's `create_from_slice` + `sync`, the same bytes written
/// into a live handle (no allocation, no pages mapped), written in pieces of 4 and 2 MiB (staging
/// chunks of that size), and the host's share alone: the same pieces copied into page-locked
/// staging as the client copies them (`stage_in_parallel`, streaming stores), with no device
/// copy, and the same with plain stores (`copy_in_parallel`). Taken in turn, `UPLOAD_ROUNDS` rounds; each
/// line the median GB/s and the spread.
fn upload_anatomy(client: &ComputeClient<CudaBackend>, summary: &mut Summary) {
    const BYTES: usize = 256 << 20;
    let data = vec![7u8; BYTES];
    let live = client.empty(BYTES as u64);
    let mut staging = client.reserve_staging(&[BYTES]);
    let write_in = |piece: usize| -> Result<(), gpuworld::Error> {
        for (index, chunk) in data.chunks(piece).enumerate() {
            let start = (index * piece) as u64;
            let part = live
                .binding()
                .slice(start..start + chunk.len() as u64)
                .map_err(gpuworld::Error::Binding)?;
            client.write(part, chunk)?;
        }
        client.sync()
    };
    let names = [
        "create_from_slice + sync (the row)",
        "write into a live handle + sync",
        "write in 4 MiB pieces + sync",
        "write in 2 MiB pieces + sync",
        "host only: 8 MiB pieces copied into page-locked staging as the client copies them (streaming stores)",
        "host only: the same with plain stores (`copy_in_parallel`)",
    ];
    let mut times: [Vec<Duration>; 6] = Default::default();
    for round in 0..UPLOAD_ROUNDS + 1 {
        let mut runs: [Duration; 6] = Default::default();
        for (which, run) in runs.iter_mut().enumerate() {
            let start = Instant::now();
            let done = match which {
                0 => {
                    let created = client.create_from_slice(&data);
                    let done = client.sync();
                    *run = start.elapsed();
                    drop(created);
                    done
                }
                1 => client.write(&live, &data).and_then(|()| client.sync()),
                2 => write_in(4 << 20),
                3 => write_in(2 << 20),
                4 => {
                    let out: &mut [u8] = &mut staging[0];
                    for (to, from) in out.chunks_mut(8 << 20).zip(data.chunks(8 << 20)) {
                        gpuworld_systems::staging::stage_in_parallel(to, from);
                    }
                    Ok(())
                }
                _ => {
                    let out: &mut [u8] = &mut staging[0];
                    for (to, from) in out.chunks_mut(8 << 20).zip(data.chunks(8 << 20)) {
                        gpuworld_systems::staging::copy_in_parallel(to, from);
                    }
                    Ok(())
                }
            };
            if which != 0 {
                *run = start.elapsed();
            }
            if let Err(error) = done {
                summary.failed("cuda device thread", names[which], &error);
                return;
            }
        }
        // The first round warms up (staging, pages, rayon's threads).
        if round > 0 {
            for (kept, run) in times.iter_mut().zip(runs) {
                kept.push(run);
            }
        }
    }
    let keys = [
        "upload_create_256MiB_gbps",
        "upload_write_live_256MiB_gbps",
        "upload_write_4MiB_pieces_gbps",
        "upload_write_2MiB_pieces_gbps",
        "upload_host_only_256MiB_gbps",
        "upload_host_only_plain_256MiB_gbps",
    ];
    for ((name, key), mut runs) in names.iter().zip(keys).zip(times) {
        let rates: Vec<f64> = runs.iter().map(|t| client_rows::gb_s(BYTES, *t)).collect();
        let median = client_rows::gb_s(BYTES, client_rows::median(&mut runs));
        client_rows::emit(&format!("cuda device thread/{key}"), median);
        summary.add(
            "cuda device thread",
            &format!("upload anatomy, 256 MiB pageable: {name} (median of {UPLOAD_ROUNDS})"),
            format!("{median:.2} GB/s"),
            spread(&rates, "GB/s"),
        );
    }
}

/// Rounds of `upload_anatomy`.
const UPLOAD_ROUNDS: usize = 9;

/// Round trips of each side before the paired loop keeps any.
const WARM_UP_ROUNDS: usize = 1000;
/// Blocks of the paired loop, each giving one ratio to raw.
const PAIRED_BLOCKS: usize = 5;
/// Rounds per block of the paired loop.
const BLOCK_ROUNDS: usize = 1000;
/// Rounds the paired loop keeps.
const ROUNDS: usize = PAIRED_BLOCKS * BLOCK_ROUNDS;

/// `low–high unit` of `values`.
fn spread(values: &[f64], unit: &str) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.2}–{high:.2} {unit}")
}

/// Runs `work` `iters` times, keeping each run's time; their sum.
fn timed(iters: u64, times: &mut Vec<Duration>, mut work: impl FnMut()) -> Duration {
    (0..iters)
        .map(|_| {
            let start = Instant::now();
            work();
            let time = start.elapsed();
            times.push(time);
            time
        })
        .sum()
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
            let runtime = RuntimeConfig::default()
                .with_max_tasks(16)
                .with_strategy(SchedulingStrategy::Interleave);
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
    drop(batched);

    let shape = Shape::DEVICE;
    let mut summary = Summary::default();
    client_rows::all_rows(&mut c, "cuda device thread", &client, shape, &mut summary);
    match CudaBackend::new(CudaConfig::default()) {
        Ok(backend) => {
            let runtime = RuntimeConfig::default()
                .with_max_tasks(gpuworld::CUDA_MAX_TASKS)
                .with_strategy(SchedulingStrategy::Interleave);
            let manual = ComputeClient::new(backend, runtime, Driver::Manual);
            client_rows::round_trip(&mut c, "cuda manual", &manual, shape, &mut summary);
            round_trip_anatomy(&mut c, &manual, &raw);
            let clients = [("cuda device thread", &client), ("cuda manual", &manual)];
            paired_round_trips(&mut c, &clients, &raw, &mut summary);
        }
        Err(error) => eprintln!("SKIPPED cuda manual round trip: {error}"),
    }
    raw_rows(&mut c, &raw, shape, &mut summary);
    upload_anatomy(&client, &mut summary);
    c.final_summary();
    summary.print();
}

//! The soak workload (issue 30's long run): frames of a small simulation driven through the
//! public client, each a heat-stencil step on a persistent field plus transient buffers of
//! several sizes that are uploaded, launched on, read back or dropped, a blocking read every
//! frame, an asynchronous read every few frames and a `sync` now and then. Every value read is
//! checked against what the frame wrote; the first mismatch or error stops the run. At a fixed
//! wall-clock interval the run samples memory in use and reserved, the process's resident
//! memory, the runtime's handle records and the frame and read latencies of the interval.
//! Included by `benches/soak.rs` (minutes on a device) and `tests/soak.rs` (seconds on cpu and
//! the sim).

#![allow(dead_code)] // each includer uses the parts it needs

use gpuworld::library::reduce::{REDUCE_SUM_TREE, TREE_ELEMENTS_PER_CUBE};
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Handle, HostBytes, ReplyFuture, library,
};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Bytes in a KiB.
pub const KIB: u64 = 1 << 10;
/// Bytes in a MiB.
pub const MIB: u64 = 1 << 20;

/// Temperature of the field's top border, which the stencil keeps fixed (as `src/cli/heat.rs`).
const HOT: f32 = 1.0;
/// Diffusion coefficient per step; explicit steps stay within [0, HOT] up to 0.25.
const ALPHA: f32 = 0.2;
/// Every this many frames an asynchronous read is queued.
const ASYNC_READ_EVERY: u64 = 4;
/// Every this many frames the frame ends with a `sync`.
const SYNC_EVERY: u64 = 100;
/// Largest integer up to which every `f32` sum of integers is exact.
const EXACT_F32_SUMS: u64 = 1 << 24;

/// What one frame allocates and launches on.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Side of the persistent heat field, in cells.
    pub side: u32,
    /// Bytes of the buffer uploaded and scaled every frame, read back every few frames.
    pub small: u64,
    /// Bytes of the buffer filled and read back, blocking, every frame.
    pub medium: u64,
    /// Bytes of the buffer uploaded and reduced every frame, its sum read every few frames.
    pub large: u64,
    /// Bytes of the buffer filled and reduced every `huge_every` frames, its sum read blocking.
    pub huge: u64,
    /// Frames between two huge buffers.
    pub huge_every: u64,
}

impl Sizes {
    /// The bench's frame: a `side`² field; 4 KiB, 64 KiB and 1 MiB every frame; 16 MiB every
    /// 50th frame.
    pub fn bench(side: u32) -> Sizes {
        Sizes {
            side,
            small: 4 * KIB,
            medium: 64 * KIB,
            large: MIB,
            huge: 16 * MIB,
            huge_every: 50,
        }
    }

    /// The test's frame, fast in a debug build (where kernels run element by element, about
    /// 5 ms a frame): a 32² field; 1 KiB, 4 KiB and 64 KiB every frame; 1 MiB every 50th frame.
    pub fn test() -> Sizes {
        Sizes {
            side: 32,
            small: KIB,
            medium: 4 * KIB,
            large: 64 * KIB,
            huge: MIB,
            huge_every: 50,
        }
    }
}

/// How long to run and how often to sample.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The frame's work.
    pub sizes: Sizes,
    /// Wall-clock time of the frames (the final check of the reads still in flight comes after).
    pub duration: Duration,
    /// Wall-clock time between two samples.
    pub interval: Duration,
}

/// The run at the end of one sampling interval, and the latencies of the frames inside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the first frame began.
    pub secs: f64,
    /// Frames finished since the start.
    pub frames: u64,
    /// Frames finished in this interval.
    pub interval_frames: u64,
    /// `memory_usage().bytes_in_use`.
    pub in_use: u64,
    /// `memory_usage().bytes_reserved`.
    pub reserved: u64,
    /// The process's resident memory (`VmRSS`), 0 where the system does not say.
    pub rss: u64,
    /// `host_records().indexed_handles`.
    pub indexed_handles: usize,
    /// `host_records().handle_entities`.
    pub handle_entities: usize,
    /// `host_records().removals`.
    pub removals: usize,
    /// Median frame time of the interval, µs.
    pub frame_p50_us: f64,
    /// 99th percentile frame time of the interval, µs.
    pub frame_p99_us: f64,
    /// Longest frame of the interval, µs.
    pub frame_max_us: f64,
    /// Median blocking read latency of the interval, µs.
    pub read_p50_us: f64,
    /// 99th percentile blocking read latency of the interval, µs.
    pub read_p99_us: f64,
    /// Errors and mismatches since the start (the first one stops the run).
    pub errors: u64,
}

/// The CSV header matching [`Sample::csv_row`].
pub const CSV_HEADER: &str = "backend,secs,frames,interval_frames,in_use_bytes,reserved_bytes,\
rss_bytes,indexed_handles,handle_entities,removals,frame_p50_us,frame_p99_us,frame_max_us,\
read_p50_us,read_p99_us,errors";

impl Sample {
    /// The sample as a CSV row under [`CSV_HEADER`].
    pub fn csv_row(&self, backend: &str) -> String {
        format!(
            "{backend},{:.3},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{}",
            self.secs,
            self.frames,
            self.interval_frames,
            self.in_use,
            self.reserved,
            self.rss,
            self.indexed_handles,
            self.handle_entities,
            self.removals,
            self.frame_p50_us,
            self.frame_p99_us,
            self.frame_max_us,
            self.read_p50_us,
            self.read_p99_us,
            self.errors
        )
    }
}

/// A finished run: its samples, and what stopped it early, if anything.
#[derive(Debug)]
pub struct Soak {
    /// One per interval, the last one taken when an error stopped the run.
    pub samples: Vec<Sample>,
    /// The first error or mismatch, with the frame and the operation it came from.
    pub failure: Option<String>,
    /// Frames run.
    pub frames: u64,
}

/// Runs the workload on `client` for `settings.duration`, calling `on_sample` with every sample
/// as it is taken (for a CSV row written before the run ends).
pub fn run<B: Backend>(
    client: &ComputeClient<B>,
    settings: &Settings,
    mut on_sample: impl FnMut(&Sample),
) -> Soak {
    let mut workload = match Workload::new(client, settings.sizes) {
        Ok(workload) => workload,
        Err(failure) => {
            return Soak {
                samples: Vec::new(),
                failure: Some(failure),
                frames: 0,
            };
        }
    };
    let mut samples = Vec::new();
    let mut interval = Interval::default();
    let mut failure = None;
    let start = Instant::now();
    let mut next_sample = start + settings.interval;
    let mut frame = 0u64;
    while start.elapsed() < settings.duration {
        let frame_start = Instant::now();
        let result = workload.frame(frame, &mut interval.reads);
        interval.frames.push(frame_start.elapsed());
        frame += 1;
        if let Err(error) = result {
            failure = Some(error);
            break;
        }
        let now = Instant::now();
        if now >= next_sample {
            let sample = interval.sample(client, start, frame, 0);
            on_sample(&sample);
            samples.push(sample);
            interval = Interval::default();
            // A frame longer than the interval skips the samples it covered.
            while next_sample <= now {
                next_sample += settings.interval;
            }
        }
    }
    if failure.is_none() {
        failure = workload.finish().err();
    }
    if failure.is_some() {
        // The interval the error fell in, so the CSV ends with the error counted.
        let sample = interval.sample(client, start, frame, 1);
        on_sample(&sample);
        samples.push(sample);
    }
    Soak {
        samples,
        failure,
        frames: frame,
    }
}

/// The frame and read times of the interval being sampled.
#[derive(Default)]
struct Interval {
    frames: Vec<Duration>,
    reads: Vec<Duration>,
}

impl Interval {
    /// The sample at the end of this interval, `frames` into the run.
    fn sample<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        start: Instant,
        frames: u64,
        errors: u64,
    ) -> Sample {
        let usage = client.memory_usage();
        let records = client.with_runtime(|runtime| runtime.host_records());
        self.frames.sort_unstable();
        self.reads.sort_unstable();
        Sample {
            secs: start.elapsed().as_secs_f64(),
            frames,
            interval_frames: self.frames.len() as u64,
            in_use: usage.bytes_in_use,
            reserved: usage.bytes_reserved,
            rss: resident_bytes(),
            indexed_handles: records.indexed_handles,
            handle_entities: records.handle_entities,
            removals: records.removals,
            frame_p50_us: percentile_us(&self.frames, 0.50),
            frame_p99_us: percentile_us(&self.frames, 0.99),
            frame_max_us: percentile_us(&self.frames, 1.0),
            read_p50_us: percentile_us(&self.reads, 0.50),
            read_p99_us: percentile_us(&self.reads, 0.99),
            errors,
        }
    }
}

/// The nearest-rank `q` quantile of `sorted`, in µs; 0 when empty.
fn percentile_us(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
}

/// The process's resident memory from `/proc/self/status` (`VmRSS`), in bytes; 0 where there is
/// no such file (not Linux) or no such line, said once on stderr so that a flat 0 is not read as
/// flat memory.
pub fn resident_bytes() -> u64 {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|kib| kib.trim().parse::<u64>().ok())
        });
    rss.map_or_else(
        || {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!("soak: resident memory is not measured here (no VmRSS in /proc/self/status): its column is 0")
            });
            0
        },
        |kib| kib * KIB,
    )
}

/// An asynchronous read queued by a frame, checked once its bytes arrive.
struct PendingRead {
    frame: u64,
    reply: ReplyFuture<Vec<HostBytes>>,
}

/// The persistent state of the simulation and the host data its frames upload.
struct Workload<'a, B: Backend> {
    client: &'a ComputeClient<B>,
    sizes: Sizes,
    /// The field after the last step, then the buffer the next step writes.
    field: Handle,
    next_field: Handle,
    /// What the small buffer is uploaded from every frame.
    small_host: Vec<f32>,
    /// What the large buffer is uploaded from every frame, and its exact sum.
    large_host: Vec<f32>,
    large_sum: f32,
    pending: VecDeque<PendingRead>,
}

impl<'a, B: Backend> Workload<'a, B> {
    /// The field's initial state on the device (top border hot, the rest cold) and the host
    /// data; compiles the kernels first, so that the first frames do not wait for a compiler.
    fn new(client: &'a ComputeClient<B>, sizes: Sizes) -> Result<Workload<'a, B>, String> {
        let huge_elements = sizes.huge / 4;
        // The largest sums checked, a huge buffer filled with 3.0 and the large buffer's
        // elements of up to 7, must be exact in f32.
        assert!(
            3 * huge_elements < EXACT_F32_SUMS && sizes.large / 4 * 7 < EXACT_F32_SUMS,
            "soak sizes too large for exact f32 sums: {sizes:?}"
        );
        for kernel in [
            &library::STENCIL,
            &library::SCALE,
            &library::FILL,
            &REDUCE_SUM_TREE,
        ] {
            client
                .warm_up(kernel)
                .map_err(|error| format!("warm-up of `{}`: {error}", kernel.name))?;
        }
        let side = sizes.side as usize;
        let mut initial = vec![0.0f32; side * side];
        initial[..side].fill(HOT);
        let small_host: Vec<f32> = (0..sizes.small / 4).map(|i| (i % 8) as f32).collect();
        let large_host: Vec<f32> = (0..sizes.large / 4).map(|i| (i % 8) as f32).collect();
        // Small integers: every partial sum of the tree is an integer below 2^24, so exact.
        let large_sum = (0..sizes.large / 4).map(|i| i % 8).sum::<u64>() as f32;
        Ok(Workload {
            client,
            sizes,
            field: client.create_from_pod(&initial),
            next_field: client.create_from_pod(&initial),
            small_host,
            large_host,
            large_sum,
            pending: VecDeque::new(),
        })
    }

    /// One frame; the time of each blocking read goes to `reads`.
    fn frame(&mut self, frame: u64, reads: &mut Vec<Duration>) -> Result<(), String> {
        let client = self.client;
        let at = |what: &'static str| failed_at(frame, what);

        // The simulation step on the persistent field.
        let side = self.sizes.side;
        let step = Bindings::new()
            .buffer(&self.field)
            .buffer(&self.next_field)
            .scalar_u32(side)
            .scalar_u32(side)
            .scalar_f32(ALPHA);
        let count = CubeCount::covering_2d(side, side, library::STENCIL_TILE);
        client
            .launch(&library::STENCIL, count, step)
            .map_err(at("stencil step"))?;
        std::mem::swap(&mut self.field, &mut self.next_field);

        // Transient buffers: uploaded, launched on, then dropped at the end of the frame,
        // read back or not.
        let small = client.create_from_pod(&self.small_host);
        let scaled = client.empty(self.sizes.small);
        let scale = Bindings::new()
            .buffer(&small)
            .buffer(&scaled)
            .scalar_f32(2.0);
        client
            .launch(&library::SCALE, linear(self.sizes.small), scale)
            .map_err(at("scale of the small buffer"))?;

        let fill_value = (frame % 1000) as f32 + 0.5;
        let filled = client.empty(self.sizes.medium);
        self.fill(&filled, fill_value)
            .map_err(at("fill of the medium buffer"))?;

        let large = client.create_from_pod(&self.large_host);
        let large_sum = self
            .reduce_sum(&large, self.sizes.large)
            .map_err(at("reduction of the large buffer"))?;

        // The blocking read every frame, as a game reads a result back before it draws.
        let read_start = Instant::now();
        let bytes = client.read_one(&filled).map_err(at("blocking read"))?;
        reads.push(read_start.elapsed());
        check_all_equal(&f32s(&bytes), self.sizes.medium / 4, fill_value).map_err(|error| {
            format!("frame {frame}: medium buffer filled with {fill_value}: {error}")
        })?;

        if frame.is_multiple_of(self.sizes.huge_every) {
            let value = ((frame / self.sizes.huge_every) % 3 + 1) as f32;
            let huge = client.empty(self.sizes.huge);
            self.fill(&huge, value)
                .map_err(at("fill of the huge buffer"))?;
            let sum = self
                .reduce_sum(&huge, self.sizes.huge)
                .map_err(at("reduction of the huge buffer"))?;
            let read_start = Instant::now();
            let bytes = client.read_one(&sum).map_err(at("read of the huge sum"))?;
            reads.push(read_start.elapsed());
            let expected = (self.sizes.huge / 4) as f32 * value;
            check_all_equal(&f32s(&bytes), 1, expected).map_err(|error| {
                format!("frame {frame}: sum of the huge buffer filled with {value}: {error}")
            })?;
        }

        if frame.is_multiple_of(ASYNC_READ_EVERY) {
            // The handles are dropped right after the read is queued: the runtime must keep
            // their memory until the read has copied it.
            let top_rows = self
                .field
                .binding()
                .slice(0..2 * u64::from(side) * 4)
                .map_err(|error| format!("frame {frame}: the field's top rows: {error}"))?;
            let reply = client.read_async(&[large_sum.binding(), scaled.binding(), top_rows]);
            self.pending.push_back(PendingRead { frame, reply });
        }
        self.check_arrived_reads()?;

        if frame % SYNC_EVERY == SYNC_EVERY - 1 {
            client.sync().map_err(at("sync"))?;
        }
        Ok(())
    }

    /// `out[i] = value` over all of `out`.
    fn fill(&self, out: &Handle, value: f32) -> gpuworld::Result<()> {
        let bindings = Bindings::new().buffer(out).scalar_f32(value);
        self.client
            .launch(&library::FILL, linear(out.size()), bindings)
    }

    /// The sum of the `bytes / 4` elements of `input`, reduced pass after pass to one `f32`.
    fn reduce_sum(&self, input: &Handle, bytes: u64) -> gpuworld::Result<Handle> {
        let mut source = input.clone();
        let mut len = (bytes / 4) as u32;
        loop {
            let cubes = len.div_ceil(TREE_ELEMENTS_PER_CUBE).max(1);
            let partials = self.client.empty(u64::from(cubes) * 4);
            let bindings = Bindings::new()
                .buffer(&source)
                .buffer(&partials)
                .scalar_u32(len);
            self.client
                .launch(&REDUCE_SUM_TREE, CubeCount::new_1d(cubes), bindings)?;
            if cubes == 1 {
                return Ok(partials);
            }
            source = partials;
            len = cubes;
        }
    }

    /// Checks the asynchronous reads whose bytes arrived, oldest first, without waiting.
    fn check_arrived_reads(&mut self) -> Result<(), String> {
        while let Some(pending) = self.pending.front_mut() {
            let mut cx = Context::from_waker(Waker::noop());
            let Poll::Ready(reply) = Pin::new(&mut pending.reply).poll(&mut cx) else {
                return Ok(());
            };
            let frame = pending.frame;
            self.pending.pop_front();
            self.check_async_read(frame, reply)?;
        }
        Ok(())
    }

    /// Waits for the asynchronous reads still in flight, checks them, and syncs.
    fn finish(&mut self) -> Result<(), String> {
        while let Some(pending) = self.pending.pop_front() {
            let reply = pollster::block_on(pending.reply);
            self.check_async_read(pending.frame, reply)?;
        }
        self.client
            .sync()
            .map_err(|error| format!("the final sync: {error}"))
    }

    /// An asynchronous read queued by `frame`: the large buffer's sum, the scaled small buffer,
    /// the field's top two rows (the hot border unchanged, the row below it within [0, HOT]).
    fn check_async_read(
        &self,
        frame: u64,
        reply: gpuworld::Result<Vec<HostBytes>>,
    ) -> Result<(), String> {
        let fail =
            |what: &str, error: String| format!("frame {frame}: async read, {what}: {error}");
        let parts = reply.map_err(|error| fail("the read", error.to_string()))?;
        let [sum, scaled, rows] = parts.as_slice() else {
            return Err(fail(
                "the read",
                format!("{} parts for 3 sources", parts.len()),
            ));
        };
        check_all_equal(&f32s(sum), 1, self.large_sum).map_err(|e| fail("the large sum", e))?;
        let scaled = f32s(scaled);
        if scaled.len() != self.small_host.len() {
            return Err(fail(
                "the scaled buffer",
                format!(
                    "{} elements, expected {}",
                    scaled.len(),
                    self.small_host.len()
                ),
            ));
        }
        if let Some((i, (got, x))) = scaled
            .iter()
            .zip(&self.small_host)
            .enumerate()
            .find(|(_, (got, x))| **got != 2.0 * **x)
        {
            return Err(fail(
                "the scaled buffer",
                format!("element {i} is {got}, expected {}", 2.0 * x),
            ));
        }
        let rows = f32s(rows);
        let side = self.sizes.side as usize;
        check_all_equal(&rows[..side.min(rows.len())], side as u64, HOT)
            .map_err(|e| fail("the field's hot border", e))?;
        if let Some((i, value)) = rows
            .iter()
            .enumerate()
            .skip(side)
            .find(|(_, value)| !(0.0..=HOT).contains(*value))
        {
            return Err(fail(
                "the field's second row",
                format!("cell {} is {value}, outside [0, {HOT}]", i - side),
            ));
        }
        Ok(())
    }
}

/// The message of an error of `frame`'s operation `what`.
fn failed_at(frame: u64, what: &'static str) -> impl Fn(gpuworld::Error) -> String {
    move |error| format!("frame {frame}: {what}: {error}")
}

/// Enough cubes of the 1-D library kernels for `bytes` of `f32`s (at most 16 MiB: 16,384 cubes,
/// within every backend's limit along x).
fn linear(bytes: u64) -> CubeCount {
    CubeCount::covering(bytes / 4, library::LINEAR_CUBE)
}

/// `bytes` as `f32`s (read bytes are only aligned for `u8`).
fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

/// Whether `values` are `len` copies of `expected`; else what differs.
fn check_all_equal(values: &[f32], len: u64, expected: f32) -> Result<(), String> {
    if values.len() as u64 != len {
        return Err(format!("{} elements, expected {len}", values.len()));
    }
    match values.iter().position(|&value| value != expected) {
        Some(i) => Err(format!("element {i} is {}, expected {expected}", values[i])),
        None => Ok(()),
    }
}

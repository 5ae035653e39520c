//! Many callers sharing one client (issue 31): N threads run one workload against one
//! `ComputeClient` at once, every value read back checked. Used by `benches/callers.rs` (time
//! budgets, 1 to 32 callers) and by `tests/callers.rs` (a bounded count of operations, a guard
//! against the collapse). It uses only calls that every gpuworld since 790d253 has, so the same
//! file measures an old build side by side (`GPUWORLD_CALLERS_OLD`, see the bench).

#![allow(dead_code)]

use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Handle, library};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Floats in every buffer of the workloads (256 bytes).
const LEN: usize = 64;

/// What each caller does in its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Creates, writes, launches, blocking and async reads, clones and drops, handles shared
    /// across threads, syncs: one round is eleven to twelve calls.
    Mixed,
    /// Launches on a kept buffer, with a blocking read every 64 launches to check them.
    LaunchOnly,
    /// Blocking reads of a kept buffer.
    ReadOnly,
    /// The loop of cubecl-bench's `concurrency` group: create 4 bytes, launch on them, read
    /// them back (blocking); three calls a round.
    RoundTrip,
}

impl Workload {
    /// Every workload, in the order of the reports.
    pub const ALL: [Workload; 4] = [
        Workload::Mixed,
        Workload::LaunchOnly,
        Workload::ReadOnly,
        Workload::RoundTrip,
    ];

    /// The workload's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Mixed => "mixed",
            Workload::LaunchOnly => "launch-only",
            Workload::ReadOnly => "read-only",
            Workload::RoundTrip => "round-trip",
        }
    }
}

/// When the callers stop.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this long (each caller finishes its round).
    After(Duration),
    /// After each caller made at least this many calls.
    Calls(u64),
}

/// What a run of N callers did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Callers.
    pub callers: usize,
    /// Client calls completed by all callers together.
    pub calls: u64,
    /// Wall time from the start of the callers to the last one's end.
    pub elapsed: Duration,
    /// Latency of the blocking reads, every caller's together: median and 99th percentile.
    pub read_p50: Duration,
    /// See `read_p50`.
    pub read_p99: Duration,
}

impl Outcome {
    /// Calls per second.
    pub fn per_second(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }
}

fn bytes_of(values: &[f32]) -> &[u8] {
    bytemuck::cast_slice(values)
}

/// Checks that `bytes` holds `LEN` copies of `expected`; panics naming `what` otherwise.
fn check(bytes: &[u8], expected: f32, what: &str) {
    assert_eq!(bytes.len(), LEN * 4, "{what}: length");
    for (index, chunk) in bytes.chunks_exact(4).enumerate() {
        let value = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        assert_eq!(value, expected, "{what}: element {index}");
    }
}

/// A handle a caller shares with the others, with the value every element holds (never written
/// again while shared).
type Shared = parking_lot::Mutex<Vec<Option<(Handle, f32)>>>;

/// Runs `workload` on `callers` threads against `client` until `stop`.
pub fn run<B: Backend>(
    client: &ComputeClient<B>,
    callers: usize,
    workload: Workload,
    stop: Stop,
) -> Outcome {
    let shared: Arc<Shared> = Arc::new(parking_lot::Mutex::new(vec![None; callers]));
    let calls = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let mut latencies: Vec<u32> = Vec::new();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..callers)
            .map(|caller| {
                let client = client.clone();
                let shared = shared.clone();
                let (calls, done) = (&calls, &done);
                scope.spawn(move || {
                    let mut me = Caller {
                        client,
                        caller,
                        shared,
                        calls: 0,
                        latencies: Vec::new(),
                    };
                    me.run(workload, stop, done);
                    calls.fetch_add(me.calls, Ordering::Relaxed);
                    me.latencies
                })
            })
            .collect();
        if let Stop::After(budget) = stop {
            std::thread::sleep(budget);
            done.store(true, Ordering::Release);
        }
        for thread in threads {
            match thread.join() {
                Ok(mine) => latencies.extend(mine),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let percentile = |p: f64| {
        if latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((latencies.len() - 1) as f64 * p).round() as usize;
        Duration::from_nanos(u64::from(latencies[index]))
    };
    Outcome {
        callers,
        calls: calls.load(Ordering::Relaxed),
        elapsed,
        read_p50: percentile(0.50),
        read_p99: percentile(0.99),
    }
}

/// One caller's state.
struct Caller<B: Backend> {
    client: ComputeClient<B>,
    caller: usize,
    shared: Arc<Shared>,
    calls: u64,
    latencies: Vec<u32>,
}

impl<B: Backend> Caller<B> {
    fn run(&mut self, workload: Workload, stop: Stop, done: &AtomicBool) {
        let kept = self.client.create_from_slice(bytes_of(&[0.0; LEN]));
        let mut round: u64 = 0;
        loop {
            let finished = match stop {
                Stop::After(_) => done.load(Ordering::Acquire),
                Stop::Calls(calls) => self.calls >= calls,
            };
            if finished {
                break;
            }
            match workload {
                Workload::Mixed => self.mixed_round(round),
                Workload::LaunchOnly => self.launch_round(&kept, round),
                Workload::ReadOnly => self.read_round(&kept),
                Workload::RoundTrip => self.round_trip(round),
            }
            round += 1;
        }
        self.client.sync().expect("the last sync");
        if let Some(slot) = self.shared.lock().get_mut(self.caller) {
            *slot = None;
        }
    }

    /// A distinct value for this caller and round (exact in f32).
    fn value(&self, round: u64) -> f32 {
        ((self.caller as u64 * 7919 + round) % 65_536) as f32
    }

    /// A blocking read of `handle`, timed and checked (`LEN` copies of `expected`).
    fn timed_read(&mut self, handle: &Handle, expected: f32, what: &str) {
        self.timed_read_with(handle, |bytes| check(bytes, expected, what));
    }

    /// A blocking read of `handle`, timed, its bytes given to `check`.
    fn timed_read_with(&mut self, handle: &Handle, check: impl FnOnce(&[u8])) {
        let start = Instant::now();
        let bytes = self.client.read_one(handle).expect("a blocking read");
        let nanos = start.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
        self.latencies.push(nanos);
        self.calls += 1;
        check(&bytes[..]);
    }

    fn mixed_round(&mut self, round: u64) {
        let client = &self.client;
        let value = self.value(round);
        let a = client.create_from_slice(bytes_of(&[value; LEN]));
        let b = client.empty((LEN * 4) as u64);
        client
            .write(&a, bytes_of(&[value + 1.0; LEN]))
            .expect("a write");
        client
            .launch(
                &library::SCALE,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&a).buffer(&b).scalar_f32(2.0),
            )
            .expect("SCALE takes two buffers and a scalar");
        self.calls += 4;
        let expected = (value + 1.0) * 2.0;
        if round.is_multiple_of(2) {
            self.timed_read(&b, expected, "blocking read of b");
        } else {
            let reply = self.client.read_async(&[b.binding()]);
            let bytes = futures_executor::block_on(reply).expect("an async read");
            self.calls += 1;
            check(&bytes[0][..], expected, "async read of b");
        }
        // Share `b` (a clone) and read what another caller shared.
        let mine = b.clone();
        self.calls += 1;
        let theirs = {
            let mut shared = self.shared.lock();
            let count = shared.len();
            shared[self.caller] = Some((mine, expected));
            let other = (self.caller + 1 + round as usize % count.max(1)) % count.max(1);
            shared[other].clone()
        };
        if let Some((handle, value)) = theirs {
            self.timed_read(&handle, value, "read of another caller's buffer");
        }
        drop((a, b));
        self.calls += 2;
        if round % 16 == 15 {
            self.client.sync().expect("a sync");
            self.calls += 1;
        }
    }

    fn launch_round(&mut self, kept: &Handle, round: u64) {
        let value = self.value(round);
        self.client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(kept).scalar_f32(value),
            )
            .expect("FILL takes one buffer and a scalar");
        self.calls += 1;
        if round % 64 == 63 {
            self.timed_read(kept, value, "read after launches");
        }
    }

    fn round_trip(&mut self, round: u64) {
        let value = self.value(round);
        let handle = self.client.create_from_slice(&0.0f32.to_le_bytes());
        self.client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&handle).scalar_f32(value),
            )
            .expect("FILL takes one buffer and a scalar");
        self.calls += 2;
        self.timed_read_with(&handle, |bytes| {
            assert_eq!(bytes, value.to_le_bytes(), "round trip");
        });
    }

    fn read_round(&mut self, kept: &Handle) {
        self.timed_read(kept, 0.0, "read of a kept buffer");
    }
}

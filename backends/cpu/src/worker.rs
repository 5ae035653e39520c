//! One worker thread per CPU stream: it runs the stream's work in order, blocks on waits for
//! other streams' events, and publishes completions, readbacks and faults through `Progress`.

use gpuworld_hal::backend::{DeviceEvent, DeviceStream, HeapStaging, HostBytes, ReadTicket};
use gpuworld_hal::backend::{OpKind, OpTime};
use gpuworld_hal::error::Error;
use gpuworld_hal::host_launch::HostLaunch;
use gpuworld_hal::host_memory::HostMemory;
use gpuworld_hal::host_ops::{Completions, Finished, HostOp};
use gpuworld_hal::host_timing::{HostTiming, describe};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::staging::StagingAllocator;
use parking_lot::{Condvar, Mutex, RwLock};
use rayon::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Cubes per rayon job: small launches run on the worker itself, large ones are split.
const CUBES_PER_JOB: u64 = 16;

#[derive(Default)]
struct ProgressState {
    done: Completions,
    /// Operation times and busy time per stream, on the workers' clock (`Progress::epoch`).
    timing: HostTiming,
    shutdown: bool,
    /// Operations finished on any stream so far: what a waiter compares with what it last saw.
    generation: u64,
}

/// An operation's description and when it ran, as a worker timed it.
type Timed = ((OpKind, u64), Instant, Instant);

/// What the workers report: completion counts, readbacks and faults, behind one lock.
pub struct Progress {
    state: Mutex<ProgressState>,
    changed: Condvar,
    /// Whether workers time their operations (a copy of `HostTiming::measuring`, read without
    /// the lock).
    measuring: AtomicBool,
    /// The origin of the workers' clock.
    epoch: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            state: Mutex::default(),
            changed: Condvar::new(),
            measuring: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }
}

impl Progress {
    /// Registers one more stream.
    pub fn add_stream(&self) {
        let mut state = self.state.lock();
        state.done.add_stream();
        state.timing.add_stream();
    }

    /// The origin of the workers' clock.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Registers `event` as a mark whose busy time `elapsed` can read.
    pub fn mark(&self, event: DeviceEvent) {
        let mut state = self.state.lock();
        let completed = state.done.completed(event.stream_and_ops().0 as usize);
        state.timing.mark(event, completed);
        self.measuring.store(true, Ordering::Relaxed);
    }

    /// The time the stream spent running work between two of its marks, once both passed.
    pub fn elapsed(&self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        self.state.lock().timing.elapsed(start, end)
    }

    /// Starts or stops keeping every operation's time.
    pub fn set_recording(&self, on: bool) {
        let mut state = self.state.lock();
        state.timing.set_recording(on);
        self.measuring
            .store(state.timing.measuring(), Ordering::Relaxed);
    }

    /// Moves the operation times kept since the last call into `into`.
    pub fn take_op_times(&self, into: &mut Vec<OpTime>) {
        self.state.lock().timing.take_ops(into);
    }

    /// Whether operations are timed now (each gets an `OpTime`).
    pub(crate) fn measuring(&self) -> bool {
        self.measuring.load(Ordering::Relaxed)
    }

    /// Operations completed by `stream`.
    pub fn completed(&self, stream: usize) -> u64 {
        self.state.lock().done.completed(stream)
    }

    /// The bytes of a finished readback, once.
    pub fn take_read(&self, ticket: ReadTicket) -> Option<HostBytes> {
        self.state.lock().done.take_read(ticket)
    }

    /// The first fault of `stream` since the last call.
    pub fn take_fault(&self, stream: usize) -> Option<Error> {
        self.state.lock().done.take_fault(stream)
    }

    /// Operations finished on any stream so far.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Blocks until some stream completes work after `seen` (a [`Progress::generation`]), at
    /// once if one already did, or until `timeout` passes; whether one did.
    pub fn wait_for_change(&self, seen: u64, timeout: Duration) -> bool {
        let mut state = self.state.lock();
        if state.generation == seen {
            self.changed.wait_for(&mut state, timeout);
        }
        state.generation != seen
    }

    fn finish(&self, stream: usize, finished: Finished, timed: Option<Timed>) {
        let mut state = self.state.lock();
        let completed = state.done.finish(stream, stream, finished);
        match timed {
            Some((what, start, end)) => {
                let ns = |at: Instant| at.saturating_duration_since(self.epoch).as_nanos() as u64;
                let at = DeviceStream(stream as u32);
                state
                    .timing
                    .finish(stream, at, what, ns(start), ns(end), completed);
            }
            None => state.timing.finish_untimed(stream, completed),
        }
        state.generation += 1;
        self.changed.notify_all();
    }

    /// Blocks until `event` passed; false if the device shut down first.
    fn wait_until(&self, event: DeviceEvent) -> bool {
        let mut state = self.state.lock();
        loop {
            if state.shutdown {
                return false;
            }
            if state.done.passed(event) {
                return true;
            }
            self.changed.wait(&mut state);
        }
    }

    fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.changed.notify_all();
    }
}

/// Operations a tick may queue for a sleeping worker before it wakes the worker rather than
/// leave that to the tick's end ([`StreamWorker::start`]).
pub(crate) const WAKE_AT: usize = 32;

/// The operations queued for one worker. The tick appends under a lock the worker takes once per
/// drain, and wakes the worker only when it sleeps: a channel woke it (a futex call on the
/// ticking thread) for nearly every operation once callers kept the tick busy (issue 31). Within
/// a tick, a sleeping worker is woken once [`WAKE_AT`] operations wait for it, or when the tick
/// polls the device or ends: a worker that ran each operation as it came slept after each, and
/// waking it took a quarter of the ticking thread's time with 8 callers launching on 2 cores.
#[derive(Default)]
struct OpQueue {
    state: Mutex<OpQueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct OpQueueState {
    ops: Vec<HostOp>,
    /// The worker waits on `ready` for operations.
    sleeping: bool,
    /// Nothing more will come: the worker exits once `ops` is empty.
    closed: bool,
}

impl OpQueue {
    /// Queues `op`, waking the worker if it sleeps and `wake` is set or [`WAKE_AT`] operations
    /// wait; whether the operation was left to a sleeping worker.
    fn push(&self, op: HostOp, wake: bool) -> bool {
        let mut state = self.state.lock();
        state.ops.push(op);
        if state.sleeping && (wake || state.ops.len() >= WAKE_AT) {
            state.sleeping = false;
            self.ready.notify_one();
        }
        state.sleeping
    }

    /// Wakes the worker if it sleeps with operations queued.
    fn wake(&self) {
        let mut state = self.state.lock();
        if state.sleeping && !state.ops.is_empty() {
            state.sleeping = false;
            self.ready.notify_one();
        }
    }

    /// Swaps every queued operation into `batch` (empty), sleeping until there is one; false
    /// once the queue is closed and empty.
    fn take(&self, batch: &mut Vec<HostOp>) -> bool {
        let mut state = self.state.lock();
        while state.ops.is_empty() {
            if state.closed {
                return false;
            }
            state.sleeping = true;
            self.ready.wait(&mut state);
        }
        std::mem::swap(&mut state.ops, batch);
        true
    }

    /// Lets the worker exit once it has run what is queued.
    fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        self.ready.notify_one();
    }
}

/// The thread that runs one stream.
pub struct StreamWorker {
    /// Where its operations go; `None` if the thread could not start.
    queue: Option<Arc<OpQueue>>,
    sent: u64,
    /// Whether operations were left queued for the worker asleep (see [`StreamWorker::start`]).
    held: bool,
    thread: Option<JoinHandle<()>>,
    progress: Arc<Progress>,
}

impl StreamWorker {
    /// Starts the worker of stream `id` at `index`; its readbacks land in `staging`, but those
    /// made for another runtime, which land in that runtime's (`HostOp::Read::into`).
    pub fn spawn(
        id: StreamId,
        index: usize,
        memory: Arc<RwLock<HostMemory>>,
        staging: Arc<HeapStaging>,
        progress: Arc<Progress>,
    ) -> StreamWorker {
        let queue = Arc::new(OpQueue::default());
        let ops = queue.clone();
        let shared = progress.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gpuworld-cpu-{index}"))
            .spawn(move || {
                let mut batch = Vec::new();
                while ops.take(&mut batch) {
                    for op in batch.drain(..) {
                        let timed = (shared.measuring().then(|| describe(&op)).flatten())
                            .map(|what| (what, Instant::now()));
                        let finished = run(op, id, &memory, &staging, &shared);
                        let timed = timed.map(|(what, start)| (what, start, Instant::now()));
                        shared.finish(index, finished, timed);
                    }
                }
            });
        let (queue, thread) = match thread {
            Ok(thread) => (Some(queue), Some(thread)),
            Err(error) => {
                tracing::error!(target: "gpuworld::stream", %error, "cannot start a CPU stream worker");
                progress.finish(
                    index,
                    Finished {
                        read: None,
                        fault: Some(Error::device_fault(
                            id,
                            format!("no worker thread: {error}"),
                        )),
                    },
                    None,
                );
                (None, None)
            }
        };
        StreamWorker {
            queue,
            sent: 0,
            held: false,
            thread,
            progress,
        }
    }

    /// Operations sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Queues an operation. With `start`, a sleeping worker is woken for it; without, it may be
    /// left queued until [`StreamWorker::start`] (or until [`WAKE_AT`] operations wait).
    pub fn send(&mut self, op: HostOp, start: bool) {
        if let Some(queue) = &self.queue {
            self.held |= queue.push(op, start);
            self.sent += 1;
        }
    }

    /// Whether the worker waits for operations, asleep.
    #[cfg(test)]
    pub(crate) fn asleep(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|queue| queue.state.lock().sleeping)
    }

    /// Wakes the worker for the operations [`StreamWorker::send`] left queued, if any.
    pub fn start(&mut self) {
        if std::mem::take(&mut self.held)
            && let Some(queue) = &self.queue
        {
            queue.wake();
        }
    }
}

impl Drop for StreamWorker {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.close();
        }
        self.progress.shut_down();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `op` of `stream`: a wait blocks this worker (outside the memory lock, so the tick can
/// allocate meanwhile); the rest runs under a read lock of the memory.
fn run(
    op: HostOp,
    stream: StreamId,
    memory: &RwLock<HostMemory>,
    staging: &HeapStaging,
    progress: &Progress,
) -> Finished {
    if let HostOp::Wait { event } = op {
        return Finished {
            read: None,
            fault: (!progress.wait_until(event))
                .then(|| Error::device_fault(stream, "device shut down during a wait")),
        };
    }
    op.run(
        &memory.read(),
        "cpu",
        stream,
        // Pooled staging: a loop of reads reuses one buffer instead of faulting in fresh pages
        // every time.
        |size| {
            usize::try_from(size)
                .ok()
                .and_then(|len| staging.take(len))
                .unwrap_or_default()
        },
        walk_in_jobs,
    )
}

/// Runs a launch's cubes: a small launch on the worker itself, a large one in jobs of
/// `CUBES_PER_JOB` cubes on rayon's pool.
fn walk_in_jobs(launch: &HostLaunch<'_>) {
    let total = launch.cubes();
    if total <= CUBES_PER_JOB {
        launch.run_in_order();
    } else {
        (0..total.div_ceil(CUBES_PER_JOB))
            .into_par_iter()
            .for_each(|job| {
                let end = ((job + 1) * CUBES_PER_JOB).min(total);
                (job * CUBES_PER_JOB..end).for_each(|cube| launch.run_cube(cube));
            });
    }
}

//! One worker thread per CPU stream: it runs the stream's work in order, blocks on waits for
//! other streams' events, and publishes completions, readbacks and faults through `Progress`.

use gpuworld_systems::backend::{HeapStaging, HostBytes, LaunchCount, ReadTicket, Region};
use gpuworld_systems::error::Error;
use gpuworld_systems::host_launch::run_on_host;
use gpuworld_systems::host_memory::HostMemory;
use gpuworld_systems::ids::StreamId;
use gpuworld_systems::kernel::{ExecutionMode, Kernel};
use gpuworld_systems::staging::StagingAllocator;
use parking_lot::{Condvar, Mutex, RwLock};
use rayon::prelude::*;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// Cubes per rayon job: small launches run on the worker itself, large ones are split.
const CUBES_PER_JOB: u64 = 16;

/// Work for a stream's worker.
pub enum Op {
    /// Copy host bytes to device memory.
    Write { dst: Region, data: HostBytes },
    /// Run a kernel.
    Launch {
        kernel: Kernel,
        count: LaunchCount,
        buffers: SmallVec<[Region; 4]>,
        scalars: SmallVec<[u32; 4]>,
        mode: ExecutionMode,
    },
    /// Copy device memory back to the host.
    Read { ticket: ReadTicket, src: Region },
    /// Block until stream `origin` completed `ops` operations.
    Wait { origin: usize, ops: u64 },
}

#[derive(Default)]
struct ProgressState {
    completed: Vec<u64>,
    faults: Vec<Option<Error>>,
    reads: HashMap<ReadTicket, HostBytes>,
    shutdown: bool,
    /// Operations finished on any stream so far: what a waiter compares with what it last saw.
    generation: u64,
}

/// What the workers report: completion counts, readbacks and faults, behind one lock.
#[derive(Default)]
pub struct Progress {
    state: Mutex<ProgressState>,
    changed: Condvar,
}

impl Progress {
    /// Registers one more stream.
    pub fn add_stream(&self) {
        let mut state = self.state.lock();
        state.completed.push(0);
        state.faults.push(None);
    }

    /// Operations completed by `stream`.
    pub fn completed(&self, stream: usize) -> u64 {
        self.state
            .lock()
            .completed
            .get(stream)
            .copied()
            .unwrap_or(0)
    }

    /// The bytes of a finished readback, once.
    pub fn take_read(&self, ticket: ReadTicket) -> Option<HostBytes> {
        self.state.lock().reads.remove(&ticket)
    }

    /// The first fault of `stream` since the last call.
    pub fn take_fault(&self, stream: usize) -> Option<Error> {
        self.state.lock().faults.get_mut(stream)?.take()
    }

    /// Operations finished on any stream so far.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Blocks until some stream completes work after `seen` (a [`Progress::generation`]), at
    /// once if one already did, or until `timeout` passes.
    pub fn wait_for_change(&self, seen: u64, timeout: Duration) {
        let mut state = self.state.lock();
        if state.generation == seen {
            self.changed.wait_for(&mut state, timeout);
        }
    }

    fn finish(&self, stream: usize, read: Option<(ReadTicket, HostBytes)>, fault: Option<Error>) {
        let mut state = self.state.lock();
        if let Some((ticket, bytes)) = read {
            state.reads.insert(ticket, bytes);
        }
        if let Some(error) = fault {
            state.faults[stream].get_or_insert(error);
        }
        state.completed[stream] += 1;
        state.generation += 1;
        self.changed.notify_all();
    }

    /// Blocks until `origin` completed `ops` operations; false if the device shut down first.
    fn wait_until(&self, origin: usize, ops: u64) -> bool {
        let mut state = self.state.lock();
        loop {
            if state.shutdown {
                return false;
            }
            if state.completed.get(origin).is_none_or(|&done| done >= ops) {
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

/// The thread that runs one stream.
pub struct StreamWorker {
    sender: Option<Sender<Op>>,
    sent: u64,
    thread: Option<JoinHandle<()>>,
    progress: Arc<Progress>,
}

impl StreamWorker {
    /// Starts the worker of stream `id` at `index`; its readbacks land in `staging`.
    pub fn spawn(
        id: StreamId,
        index: usize,
        memory: Arc<RwLock<HostMemory>>,
        staging: Arc<HeapStaging>,
        progress: Arc<Progress>,
    ) -> StreamWorker {
        let (sender, receiver) = channel::<Op>();
        let shared = progress.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gpuworld-cpu-{index}"))
            .spawn(move || {
                while let Ok(op) = receiver.recv() {
                    let (read, fault) = run(op, id, &memory, &staging, &shared);
                    shared.finish(index, read, fault);
                }
            });
        let (sender, thread) = match thread {
            Ok(thread) => (Some(sender), Some(thread)),
            Err(error) => {
                tracing::error!(target: "gpuworld::stream", %error, "cannot start a CPU stream worker");
                progress.finish(
                    index,
                    None,
                    Some(Error::device_fault(
                        id,
                        format!("no worker thread: {error}"),
                    )),
                );
                (None, None)
            }
        };
        StreamWorker {
            sender,
            sent: 0,
            thread,
            progress,
        }
    }

    /// Operations sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Queues an operation.
    pub fn send(&mut self, op: Op) {
        if let Some(sender) = &self.sender
            && sender.send(op).is_ok()
        {
            self.sent += 1;
        }
    }
}

impl Drop for StreamWorker {
    fn drop(&mut self) {
        self.sender = None;
        self.progress.shut_down();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    op: Op,
    stream: StreamId,
    memory: &RwLock<HostMemory>,
    staging: &HeapStaging,
    progress: &Progress,
) -> (Option<(ReadTicket, HostBytes)>, Option<Error>) {
    match op {
        Op::Write { dst, data } => {
            let written = memory.read().write(dst, &data);
            let fault = (!written).then(|| Error::device_fault(stream, "write to freed memory"));
            (None, fault)
        }
        Op::Read { ticket, src } => {
            // Pooled staging: a loop of reads reuses one buffer instead of faulting in fresh
            // pages every time.
            let mut bytes = usize::try_from(src.size)
                .ok()
                .and_then(|len| staging.take(len))
                .unwrap_or_default();
            if memory.read().read_into(src, &mut bytes) && bytes.len() as u64 == src.size {
                (Some((ticket, bytes)), None)
            } else {
                (
                    Some((ticket, HostBytes::default())),
                    Some(Error::device_fault(stream, "read of freed memory")),
                )
            }
        }
        Op::Launch {
            kernel,
            count,
            buffers,
            scalars,
            mode,
        } => {
            let result = launch(
                stream,
                &memory.read(),
                kernel,
                count,
                &buffers,
                &scalars,
                mode,
            );
            (None, result.err())
        }
        Op::Wait { origin, ops } => {
            let fault = (!progress.wait_until(origin, ops))
                .then(|| Error::device_fault(stream, "device shut down during a wait"));
            (None, fault)
        }
    }
}

fn launch(
    stream: StreamId,
    memory: &HostMemory,
    kernel: Kernel,
    count: LaunchCount,
    buffers: &[Region],
    scalars: &[u32],
    mode: ExecutionMode,
) -> Result<(), Error> {
    run_on_host(
        memory,
        "cpu",
        stream,
        kernel,
        count,
        buffers,
        scalars,
        mode,
        |launch| {
            let total = launch.cubes();
            if total <= CUBES_PER_JOB {
                (0..total).for_each(|cube| launch.run_cube(cube));
            } else {
                (0..total.div_ceil(CUBES_PER_JOB))
                    .into_par_iter()
                    .for_each(|job| {
                        let end = ((job + 1) * CUBES_PER_JOB).min(total);
                        (job * CUBES_PER_JOB..end).for_each(|cube| launch.run_cube(cube));
                    });
            }
        },
    )
}

//! The operations of a device whose memory is host memory, shared by the cpu and sim backends:
//! what a stream queues, how one write, copy, read or launch runs on `HostMemory`, and the record
//! of finished work (completions per stream, first faults, readbacks) that events are answered
//! from. The backends differ in when an operation runs and who waits: the sim's poll in virtual
//! time, the cpu's worker threads.

use crate::backend::{DeviceEvent, LaunchCount, ReadTicket, Region};
use crate::bytes::HostBytes;
use crate::error::Error;
use crate::graph::PlannedLaunch;
use crate::host_launch::{HostLaunch, run_on_host};
use crate::host_memory::HostMemory;
use crate::ids::StreamId;
use crate::kernel::{ExecutionMode, Kernel};
use crate::staging::StagingAllocator;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

/// Work queued on a host-memory stream, as `Backend` received it.
#[derive(Debug)]
pub enum HostOp {
    /// Copy host bytes to device memory.
    Write {
        /// Where the bytes go.
        dst: Region,
        /// The bytes.
        data: HostBytes,
    },
    /// Copy device memory to other device memory (`Queue::copy`).
    Copy {
        /// What is copied.
        src: Region,
        /// Where it goes: as long as `src`, sharing no byte with it.
        dst: Region,
    },
    /// Run a kernel.
    Launch {
        /// The kernel.
        kernel: Kernel,
        /// Its cube count.
        count: LaunchCount,
        /// Its buffers.
        buffers: SmallVec<[Region; 4]>,
        /// Its scalars.
        scalars: SmallVec<[u32; 4]>,
        /// Checked or unchecked access.
        mode: ExecutionMode,
    },
    /// Copy device memory back to the host.
    Read {
        /// The readback's ticket.
        ticket: ReadTicket,
        /// What is read.
        src: Region,
        /// Where the bytes land when another runtime takes them (`Backend::read_for`): that
        /// runtime's staging, unless it has none to lend.
        into: Option<Arc<dyn StagingAllocator>>,
    },
    /// Hold the stream until `event` has passed.
    Wait {
        /// The event waited on.
        event: DeviceEvent,
    },
    /// Run a captured graph's launches in order, as one operation (`Queue::graph_replay`).
    Replay {
        /// The launches; their bindings index `buffers`.
        launches: Arc<[PlannedLaunch]>,
        /// The replay task's buffers.
        buffers: SmallVec<[Region; 4]>,
    },
}

/// What a finished operation leaves: a readback, a fault for its stream.
#[derive(Debug, Default)]
pub struct Finished {
    /// The readback's ticket and bytes (empty after a fault).
    pub read: Option<(ReadTicket, HostBytes)>,
    /// The fault it caused.
    pub fault: Option<Error>,
}

impl HostOp {
    /// A launch, its buffers and scalars copied into the operation.
    // Inlined: the operation is built, and run, in place instead of copied through calls.
    #[inline]
    pub fn launch(
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) -> HostOp {
        HostOp::Launch {
            kernel,
            count,
            buffers: buffers.iter().copied().collect(),
            scalars: scalars.iter().copied().collect(),
            mode,
        }
    }

    /// Runs a write, copy, read or launch of `stream` on `memory`; a read copies into the buffer
    /// `read_buffer` gives for its size, a launch walks its cubes with `walk` (see
    /// [`run_on_host`]). A wait does nothing here: the caller runs it only once its event passed.
    // Inlined: the operation is built, and run, in place instead of copied through calls.
    #[inline]
    pub fn run(
        &self,
        memory: &HostMemory,
        backend: &'static str,
        stream: StreamId,
        read_buffer: impl FnOnce(u64) -> HostBytes,
        mut walk: impl FnMut(&HostLaunch<'_>),
    ) -> Finished {
        match self {
            HostOp::Write { dst, data } => Finished {
                read: None,
                fault: (!memory.write(*dst, data))
                    .then(|| Error::device_fault(stream, "write to freed memory")),
            },
            HostOp::Copy { src, dst } => Finished {
                read: None,
                fault: copy_fault(memory, *src, *dst)
                    .map(|problem| Error::device_fault(stream, problem)),
            },
            HostOp::Read { ticket, src, into } => {
                let lent = into
                    .as_ref()
                    .zip(usize::try_from(src.size).ok())
                    .and_then(|(into, len)| into.take(len));
                let mut bytes = lent.unwrap_or_else(|| read_buffer(src.size));
                if memory.read_into(*src, &mut bytes) && bytes.len() as u64 == src.size {
                    Finished {
                        read: Some((*ticket, bytes)),
                        fault: None,
                    }
                } else {
                    Finished {
                        read: Some((*ticket, HostBytes::default())),
                        fault: Some(Error::device_fault(stream, "read of freed memory")),
                    }
                }
            }
            HostOp::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode,
            } => Finished {
                read: None,
                fault: run_on_host(
                    memory, backend, stream, kernel, *count, buffers, scalars, *mode, walk,
                )
                .err(),
            },
            HostOp::Wait { .. } => Finished::default(),
            HostOp::Replay { launches, buffers } => {
                // Every launch runs, as eager launches would; the first fault is the stream's.
                let mut fault = None;
                for launch in launches.iter() {
                    let regions: Option<SmallVec<[Region; 4]>> = (launch.bindings.iter())
                        .map(|&i| buffers.get(usize::from(i)).copied())
                        .collect();
                    let ran = match regions {
                        Some(regions) => run_on_host(
                            memory,
                            backend,
                            stream,
                            launch.kernel,
                            LaunchCount::Static(launch.grid),
                            &regions,
                            &launch.scalars,
                            launch.mode,
                            &mut walk,
                        ),
                        None => Err(Error::device_fault(
                            stream,
                            format!(
                                "graph replay of `{}` names a binding past the task's {}",
                                launch.kernel.name,
                                buffers.len()
                            ),
                        )),
                    };
                    if let Err(error) = ran {
                        fault.get_or_insert(error);
                    }
                }
                Finished { read: None, fault }
            }
        }
    }
}

/// Runs a device-to-device copy on `memory`; what is wrong with it, if it cannot run.
fn copy_fault(memory: &HostMemory, src: Region, dst: Region) -> Option<&'static str> {
    src.copy_refusal(&dst)
        .or_else(|| (!memory.copy(src, dst)).then_some("copy of freed memory"))
}

/// Finished work of host-memory streams: operations completed per stream, each stream's first
/// fault since it was last taken, and readbacks not yet taken.
#[derive(Debug, Default)]
pub struct Completions {
    completed: Vec<u64>,
    faults: Vec<Option<Error>>,
    reads: HashMap<ReadTicket, HostBytes>,
}

impl Completions {
    /// Registers one more stream.
    pub fn add_stream(&mut self) {
        self.completed.push(0);
        self.faults.push(None);
    }

    /// Counts one more operation completed on `queue`, keeps its readback and gives its fault to
    /// `submitter` (the stream that queued it); the operations `queue` has now completed.
    #[inline]
    pub fn finish(&mut self, queue: usize, submitter: usize, finished: Finished) -> u64 {
        if let Some((ticket, bytes)) = finished.read {
            self.reads.insert(ticket, bytes);
        }
        if let Some(error) = finished.fault
            && let Some(fault) = self.faults.get_mut(submitter)
        {
            fault.get_or_insert(error);
        }
        match self.completed.get_mut(queue) {
            Some(completed) => {
                *completed += 1;
                *completed
            }
            None => 0,
        }
    }

    /// Operations completed by `stream` (0 for a stream that does not exist).
    pub fn completed(&self, stream: usize) -> u64 {
        self.completed.get(stream).copied().unwrap_or(0)
    }

    /// Whether `event` has passed (an event of a stream that does not exist has).
    pub fn passed(&self, event: DeviceEvent) -> bool {
        let (stream, ops) = event.stream_and_ops();
        self.completed
            .get(stream as usize)
            .is_none_or(|&completed| completed >= ops)
    }

    /// The bytes of a finished readback, once.
    pub fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.reads.remove(&ticket)
    }

    /// The first fault of `stream` since the last call.
    pub fn take_fault(&mut self, stream: usize) -> Option<Error> {
        self.faults.get_mut(stream)?.take()
    }
}

/// The name of an event of a host-memory stream in snapshots and logs: `d<stream>@<ops>`.
pub fn event_label(event: DeviceEvent) -> String {
    let (stream, ops) = event.stream_and_ops();
    format!("d{stream}@{ops}")
}

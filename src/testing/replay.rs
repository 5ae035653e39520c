//! Replay: sends a [`Recording`]'s commands to a runtime on any backend, each in the tick it was
//! recorded in, and collects what the reads and syncs returned. On the sim the replay is
//! deterministic, tick for tick; on another backend it shows whether the results agree.

use super::record::{Data, RecordedBinding, RecordedCommand, RecordedOp, Recording};
use crate::{Backend, ComputeClient, Error, KernelDef, library};
use futures_channel::oneshot;
use gpuworld_systems::CubeCount;
use gpuworld_systems::error::BindingError;
use gpuworld_systems::inbox::{Command, Inbox, Launch, Op, PinHolder, ReadReply};
use gpuworld_systems::kernel::LaunchMode;
use gpuworld_systems::memory::AllocationMode;
use gpuworld_systems::{Handle, HandleId, StreamId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Most ticks a replay runs after the recorded ones while replies are still on their way.
pub const MAX_DRAIN_TICKS: u64 = 100_000;

/// Why a recording could not be replayed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ReplayError {
    /// A launch names a kernel that is neither in the library nor registered.
    #[error(
        "the recording launches kernel `{kernel}`, which is not in gpuworld's library; a kernel \
         is code, not data, so `gpuworld replay` knows only the library's: replay it from the \
         crate that defines it, with `Replayer::new(Recording::load(path)?).kernel(&KERNEL)` \
         and `.replay(&client, |_| {{}})` (docs/testing.md, \"Record and replay\")"
    )]
    UnknownKernel {
        /// The kernel's id.
        kernel: String,
    },
    /// A command uses a handle the recording never created (created before recording began).
    #[error("the recording uses handle h{handle}, which it never created")]
    UnknownHandle {
        /// The handle's id in the recorded run.
        handle: u64,
    },
    /// A recorded graph holds an operation a graph never captures.
    #[error("a recorded graph replay holds {op}, which a graph cannot hold")]
    BadGraph {
        /// The operation, as recorded.
        op: String,
    },
    /// Uploaded bytes are malformed.
    #[error("the recording's bytes for handle h{handle} are not valid hex")]
    BadData {
        /// The handle written.
        handle: u64,
    },
    /// The recording holds work between runtimes (a transfer's arriving bytes, a collective),
    /// which one runtime cannot replay: their other side was not recorded.
    #[error(
        "the recording's {op} on stream {stream} came from another runtime (to_client or a collective): one runtime cannot replay it"
    )]
    FromAnotherRuntime {
        /// What it was: `arriving bytes` or the collective's name.
        op: String,
        /// The stream it ran on.
        stream: u64,
    },
    /// A recorded binding is not inside its handle.
    #[error("the recording binds handle h{handle} outside its memory: {error}")]
    BadBinding {
        /// The handle's id in the recorded run.
        handle: u64,
        /// What is wrong with the range.
        error: Error,
    },
    /// Replies were still missing after [`MAX_DRAIN_TICKS`] more ticks.
    #[error("replies were still in flight {ticks} ticks after the recording ended")]
    NotIdle {
        /// Ticks run after the recording's.
        ticks: u64,
    },
}

/// What one read of a replay returned.
#[derive(Debug)]
pub struct ReadOutcome {
    /// The recorded tick that ingested the read.
    pub tick: u64,
    /// Its stream.
    pub stream: u64,
    /// The bytes of each binding, or the error the read reported.
    pub result: Result<Vec<Vec<u8>>, Error>,
}

/// What a replay returned: every read's bytes and every sync's result, in recorded order.
#[derive(Debug, Default)]
pub struct ReplayReport {
    /// Ticks run (the recorded ones, then those that waited for replies).
    pub ticks: u64,
    /// Commands sent.
    pub commands: usize,
    /// The reads.
    pub reads: Vec<ReadOutcome>,
    /// The syncs' results, with their stream.
    pub syncs: Vec<(u64, Result<(), Error>)>,
    /// Launches recorded unchecked that the replay ran checked (see
    /// [`Replayer::unchecked_as_recorded`]).
    pub checked_instead: usize,
}

impl ReplayReport {
    /// Whether every read returned the same bytes, and every sync the same success, as in
    /// `other` (errors compare by message).
    pub fn same_results(&self, other: &ReplayReport) -> bool {
        let reads = |r: &ReplayReport| -> Vec<Result<Vec<Vec<u8>>, String>> {
            r.reads
                .iter()
                .map(|read| read.result.clone().map_err(|e| e.to_string()))
                .collect()
        };
        let syncs = |r: &ReplayReport| -> Vec<bool> {
            r.syncs.iter().map(|(_, result)| result.is_ok()).collect()
        };
        reads(self) == reads(other) && syncs(self) == syncs(other)
    }
}

/// Replays a [`Recording`]; knows the library's kernels by id, and the user kernels registered
/// with [`Replayer::kernel`]. A launch recorded unchecked is replayed checked, which computes
/// the same for a launch that kept its promise to stay in bounds, unless `unsafe` code asked for
/// [`Replayer::unchecked_as_recorded`]: a recording is data (a file, perhaps edited), and
/// nothing in it vouches for its launches.
#[derive(Debug)]
pub struct Replayer {
    recording: Recording,
    kernels: HashMap<&'static str, &'static KernelDef>,
    unchecked_as_recorded: bool,
}

enum Waiting {
    Read(usize, oneshot::Receiver<ReadReply>),
    Sync(usize, oneshot::Receiver<gpuworld_systems::Result<()>>),
    Mark(oneshot::Receiver<gpuworld_systems::Result<gpuworld_systems::backend::DeviceEvent>>),
}

impl Replayer {
    /// A replayer of `recording`.
    pub fn new(recording: Recording) -> Replayer {
        let kernels = library::ALL
            .iter()
            .copied()
            .map(|kernel| (kernel.id, kernel))
            .collect();
        Replayer {
            recording,
            kernels,
            unchecked_as_recorded: false,
        }
    }

    /// Replays the launches recorded unchecked without bound checks, as they first ran (to
    /// reproduce their timing, or a device's fault), instead of checked.
    ///
    /// # Safety
    /// Every launch the recording marks unchecked must access only bytes inside its bindings,
    /// for its recorded cube count and scalars, on the backend replayed to: see
    /// [`ComputeClient::launch_unchecked`].
    pub unsafe fn unchecked_as_recorded(mut self) -> Replayer {
        self.unchecked_as_recorded = true;
        self
    }

    /// Registers a user kernel, found by its id when the recording launches it.
    pub fn kernel(mut self, kernel: &'static KernelDef) -> Replayer {
        self.kernels.insert(kernel.id, kernel);
        self
    }

    /// The recording replayed.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// Sends the recording's commands to `client`'s runtime, each before the tick it was
    /// recorded in, ticking once per recorded tick and calling `after_tick` with its number; then
    /// ticks until every read and sync has replied. The client should be ticked by hand
    /// (`Driver::Manual`) for the ticks to match the recording's.
    pub fn replay<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        mut after_tick: impl FnMut(u64),
    ) -> Result<ReplayReport, ReplayError> {
        let mut session = Session {
            replayer: self,
            inbox: client.inbox().clone(),
            handles: HashMap::new(),
            pins: HashMap::new(),
            released_while_held: HashSet::new(),
            report: ReplayReport::default(),
            waiting: Vec::new(),
        };
        let mut commands = self.recording.commands.iter().peekable();
        let last_tick = self
            .recording
            .commands
            .iter()
            .map(|c| c.tick)
            .max()
            .unwrap_or(0)
            .max(self.recording.ticks);
        for tick in 1..=last_tick {
            while let Some(recorded) = commands.next_if(|c| c.tick <= tick) {
                session.issue(recorded)?;
            }
            client.tick();
            after_tick(tick);
            session.collect();
        }
        session.report.ticks = last_tick;
        let mut extra = 0;
        while !session.waiting.is_empty() {
            if extra == MAX_DRAIN_TICKS {
                return Err(ReplayError::NotIdle { ticks: extra });
            }
            client.with_runtime(|rt| rt.wait_for_device(Duration::from_millis(1)));
            client.tick();
            extra += 1;
            session.collect();
        }
        session.report.ticks += extra;
        Ok(session.report)
    }
}

/// A replay in progress: the replay's own handles by recorded id (a binding is made from one,
/// and dropping one at its recorded release releases it), captured graphs' holds by recorded id
/// with the handles released while held (kept until the last unpin, which then releases them),
/// and the replies still to come.
struct Session<'r> {
    replayer: &'r Replayer,
    inbox: Arc<Inbox>,
    handles: HashMap<u64, Handle>,
    pins: HashMap<u64, u32>,
    released_while_held: HashSet<u64>,
    report: ReplayReport,
    waiting: Vec<Waiting>,
}

impl Session<'_> {
    /// Sends one recorded command (or, for a creation or a release, does what the client did).
    fn issue(&mut self, recorded: &RecordedCommand) -> Result<(), ReplayError> {
        let command = match &recorded.op {
            RecordedOp::Create {
                handle,
                size,
                data,
                stream,
            } => {
                let bytes = (data.as_ref())
                    .map(|d| bytes_of(d, *handle))
                    .transpose()?
                    .map(Into::into);
                let created = Handle::create(&self.inbox, *size, bytes, stream_of(*stream));
                self.handles.insert(*handle, created);
                self.report.commands += 1;
                return Ok(());
            }
            RecordedOp::Release { handle } => return self.release(*handle),
            RecordedOp::Unpin { handle, lease } => return self.unpin(*handle, *lease),
            RecordedOp::Pin { handle, lease } => {
                let handle = self.handle_id(*handle)?;
                *self.pins.entry(handle.0).or_default() += 1;
                Command::Op(Op::Pin {
                    handle: handle.1,
                    holder: holder_of(*lease),
                })
            }
            RecordedOp::Read { sources, stream } => self.read(recorded.tick, sources, *stream)?,
            RecordedOp::Sync { stream } => {
                let (reply, receiver) = oneshot::channel();
                self.waiting
                    .push(Waiting::Sync(self.report.syncs.len(), receiver));
                self.report.syncs.push((*stream, Err(Error::Disconnected)));
                Command::Sync {
                    stream: stream_of(*stream),
                    reply,
                }
            }
            RecordedOp::Mark { stream } => {
                let (reply, receiver) = oneshot::channel();
                self.waiting.push(Waiting::Mark(receiver));
                Command::Mark {
                    stream: stream_of(*stream),
                    reply,
                }
            }
            RecordedOp::Arriving { stream, .. } => {
                return Err(ReplayError::FromAnotherRuntime {
                    op: "arriving bytes".to_string(),
                    stream: *stream,
                });
            }
            RecordedOp::Native { name, stream, .. } => {
                return Err(ReplayError::FromAnotherRuntime {
                    op: name.clone(),
                    stream: *stream,
                });
            }
            RecordedOp::Replay {
                graph,
                version,
                ops,
            } => Command::Replay {
                graph: *graph,
                version: *version,
                ops: Arc::new(
                    (ops.iter())
                        .map(|op| self.graph_op(op))
                        .collect::<Result<_, _>>()?,
                ),
            },
            other => Command::Op(self.op(other)?),
        };
        self.inbox.push(command);
        self.report.commands += 1;
        Ok(())
    }

    /// The op `recorded` is, with the replay's handles and the replayer's kernels: a write, a
    /// launch, a flush, a cleanup or an allocation mode.
    fn op(&mut self, recorded: &RecordedOp) -> Result<Op, ReplayError> {
        Ok(match recorded {
            RecordedOp::Launch {
                kernel,
                cubes,
                cubes_from,
                buffers,
                scalars,
                unchecked,
                stream,
            } => {
                let def = *(self.replayer.kernels.get(kernel.as_str())).ok_or_else(|| {
                    ReplayError::UnknownKernel {
                        kernel: kernel.clone(),
                    }
                })?;
                let count = match (cubes, cubes_from) {
                    (_, Some(from)) => CubeCount::Dynamic(self.binding(from)?),
                    (Some([x, y, z]), None) => CubeCount::Static(*x, *y, *z),
                    (None, None) => CubeCount::Static(0, 0, 0),
                };
                let mode = match (*unchecked, self.replayer.unchecked_as_recorded) {
                    // SAFETY: the caller of `unchecked_as_recorded` vouched for every launch
                    // the recording marks unchecked.
                    (true, true) => unsafe { LaunchMode::unchecked() },
                    (true, false) => {
                        self.report.checked_instead += 1;
                        LaunchMode::CHECKED
                    }
                    (false, _) => LaunchMode::CHECKED,
                };
                let buffers = (buffers.iter())
                    .map(|b| self.binding(b))
                    .collect::<Result<_, _>>()?;
                let scalars = scalars.iter().copied().collect();
                Op::Launch(Launch::new(
                    def,
                    count,
                    buffers,
                    scalars,
                    mode,
                    stream_of(*stream),
                ))
            }
            RecordedOp::Write { dst, data, stream } => Op::Write {
                dst: self.binding(dst)?,
                data: bytes_of(data, dst.handle)?.into(),
                stream: stream_of(*stream),
            },
            RecordedOp::Flush { stream } => Op::Flush {
                stream: stream_of(*stream),
            },
            RecordedOp::MemoryCleanup => Op::MemoryCleanup,
            RecordedOp::OpenAllocationMode { stream, persistent } => Op::OpenAllocationMode {
                stream: stream_of(*stream),
                mode: if *persistent {
                    AllocationMode::Persistent
                } else {
                    AllocationMode::Auto
                },
            },
            RecordedOp::CloseAllocationMode { stream } => Op::CloseAllocationMode {
                stream: stream_of(*stream),
            },
            other => {
                return Err(ReplayError::BadGraph {
                    op: format!("{other:?}"),
                });
            }
        })
    }

    /// An op of a recorded graph replay: a launch, a write or a flush.
    fn graph_op(&mut self, recorded: &RecordedOp) -> Result<Op, ReplayError> {
        match recorded {
            RecordedOp::Launch { .. } | RecordedOp::Write { .. } | RecordedOp::Flush { .. } => {
                self.op(recorded)
            }
            other => Err(ReplayError::BadGraph {
                op: format!("{other:?}"),
            }),
        }
    }

    /// A read of `sources`, its outcome slot kept in the report until its reply comes.
    fn read(
        &mut self,
        tick: u64,
        sources: &[RecordedBinding],
        stream: u64,
    ) -> Result<Command, ReplayError> {
        let sources = (sources.iter())
            .map(|b| self.binding(b))
            .collect::<Result<_, _>>()?;
        let (reply, receiver) = oneshot::channel();
        self.waiting
            .push(Waiting::Read(self.report.reads.len(), receiver));
        self.report.reads.push(ReadOutcome {
            tick,
            stream,
            result: Err(Error::Disconnected),
        });
        Ok(Command::Read {
            sources,
            stream: stream_of(stream),
            reply,
            staging: None,
        })
    }

    /// The recorded release of `handle`: the replay holds the only clone, and dropping it
    /// pushes the release. One a graph holds is kept until the graph's last unpin, which then
    /// releases it (the runtime would keep its memory until then anyway).
    fn release(&mut self, handle: u64) -> Result<(), ReplayError> {
        if !self.handles.contains_key(&handle) {
            return Err(ReplayError::UnknownHandle { handle });
        }
        if self.pins.get(&handle).is_some_and(|&n| n > 0) {
            self.released_while_held.insert(handle);
        } else {
            self.handles.remove(&handle);
        }
        self.report.commands += 1;
        Ok(())
    }

    /// The recorded unpin of `handle`; its last releases a handle released while held.
    fn unpin(&mut self, handle: u64, lease: bool) -> Result<(), ReplayError> {
        let (recorded, id) = self.handle_id(handle)?;
        self.inbox.push(Command::Op(Op::Unpin {
            handle: id,
            holder: holder_of(lease),
        }));
        let left = self.pins.get_mut(&recorded).map_or(0, |n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 && self.released_while_held.remove(&recorded) {
            self.handles.remove(&recorded);
        }
        self.report.commands += 1;
        Ok(())
    }

    /// The recorded id of a handle the replay made, and the id the replay's runtime gave it.
    fn handle_id(&self, handle: u64) -> Result<(u64, HandleId), ReplayError> {
        (self.handles.get(&handle))
            .map(|h| (handle, h.id()))
            .ok_or(ReplayError::UnknownHandle { handle })
    }

    /// A binding of a live handle, or of one a graph still holds.
    fn binding(&self, b: &RecordedBinding) -> Result<gpuworld_systems::Binding, ReplayError> {
        let handle =
            (self.handles.get(&b.handle)).ok_or(ReplayError::UnknownHandle { handle: b.handle })?;
        bind(handle, b)
    }

    /// Moves the replies that arrived into the report.
    fn collect(&mut self) {
        collect(&mut self.waiting, &mut self.report);
    }
}

/// The bytes of `data`, written into recorded handle `handle`.
fn bytes_of(data: &Data, handle: u64) -> Result<Vec<u8>, ReplayError> {
    data.bytes().ok_or(ReplayError::BadData { handle })
}

/// The stream of recorded number `value`.
fn stream_of(value: u64) -> StreamId {
    StreamId { value }
}

/// The recorded binding `b` of `handle`.
fn bind(handle: &Handle, b: &RecordedBinding) -> Result<gpuworld_systems::Binding, ReplayError> {
    let bad = |error: BindingError| ReplayError::BadBinding {
        handle: b.handle,
        error: error.into(),
    };
    let end = b
        .capacity
        .checked_sub(b.offset_end)
        .ok_or(bad(BindingError::OutOfRange {
            handle: handle.id(),
            start: b.offset_start,
            end: 0,
            size: b.capacity,
        }))?;
    handle.binding().slice(b.offset_start..end).map_err(bad)
}

/// Moves the replies that arrived into `report`.
fn collect(waiting: &mut Vec<Waiting>, report: &mut ReplayReport) {
    waiting.retain_mut(|wait| match wait {
        Waiting::Read(index, receiver) => match receiver.try_recv() {
            Ok(None) => true,
            Ok(Some(result)) => {
                report.reads[*index].result =
                    result.map(|bytes| bytes.into_iter().map(Vec::from).collect());
                false
            }
            Err(_) => false,
        },
        Waiting::Sync(index, receiver) => match receiver.try_recv() {
            Ok(None) => true,
            Ok(Some(result)) => {
                report.syncs[*index].1 = result;
                false
            }
            Err(_) => false,
        },
        Waiting::Mark(receiver) => matches!(receiver.try_recv(), Ok(None)),
    });
}

/// Who a recorded pin names: a render lease or (as older recordings say nothing) a graph.
fn holder_of(lease: bool) -> PinHolder {
    if lease {
        PinHolder::Lease
    } else {
        PinHolder::Graph
    }
}

//! Capturing (issue 28): the commands a client issued during a capture, kept to be replayed
//! as one unit. A capture runs its work once (the warm-up: every allocation in it is made then,
//! and the graph keeps it), and the inbox records, from the capturing thread, the launches,
//! writes and flushes it queues. A replay is one [`crate::inbox::Command::Replay`] that ingest
//! turns into the same tasks, in order, on the same handles: eager work before and after it is
//! ordered against it exactly as against any command of its streams.
//!
//! Every handle a recorded op uses is pinned ([`Op::Pin`]) as soon as it is recorded: a release
//! by the user while the graph lives takes effect only when the graph goes, so its memory is
//! never reused under a replay. A graph's nodes are the ops themselves ([`Captured::Op`]); a
//! transfer to another runtime is recorded as [`Captured::Transfer`]: its [`TransferOut`]
//! issues it again at every replay, as `to_client_into` would. A host read, a sync, a mark, a collective or a transfer *from* another runtime (which
//! the source's capture must record) cannot be replayed and is refused with
//! [`GraphError::NotCapturable`] naming the call.
//!
//! Captures of several runtimes opened together share a [`CaptureOrder`]: every command recorded
//! on any of them takes the next number of it, so the graph replays their commands in the order
//! they were issued across runtimes.

use super::{Command, Op};
use crate::binding::Binding;
use crate::error::{Error, GraphError};
use crate::ids::{HandleId, RuntimeId, StreamId};
use smallvec::{SmallVec, smallvec};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

/// A transfer to another runtime recorded in a capture (`to_client_into` from the capturing
/// client): the client layer implements it over both clients, so a replay can issue it again.
pub trait TransferOut: Send + Sync + std::fmt::Debug {
    /// Queues the transfer once more, exactly as `to_client_into` queues it: its part on the
    /// source's stream and its parts on the destination's, bypassing any capture open on
    /// either runtime (the transfer belongs to the graph that recorded it).
    fn issue(&self) -> Result<(), Error>;
    /// The destination runtime and range.
    fn destination(&self) -> (RuntimeId, Binding);
}

/// The order of the commands recorded by captures opened together on several runtimes.
#[derive(Clone, Debug, Default)]
pub struct CaptureOrder(Arc<AtomicU64>);

impl CaptureOrder {
    /// The next number, for a command recorded now.
    fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// One node of a captured graph: an op its runtime replays, or a transfer to another runtime
/// that the graph issues itself.
#[derive(Clone, Debug, PartialEq)]
pub enum Captured {
    /// A launch, write or flush, replayed by its runtime ([`Command::Replay`]).
    Op(Op),
    /// A copy of `src` into another runtime's buffer (`to_client_into` inside the capture),
    /// issued again through its target at every replay; never part of a [`Command::Replay`].
    Transfer(CapturedTransfer),
}

/// A transfer to another runtime recorded in a capture.
#[derive(Clone, Debug)]
pub struct CapturedTransfer {
    /// The source range, on the capturing runtime.
    pub src: Binding,
    /// The source's stream.
    pub stream: StreamId,
    /// The destination, and the way to issue the transfer again.
    pub target: Arc<dyn TransferOut>,
}

impl PartialEq for CapturedTransfer {
    /// The same range to the same destination.
    fn eq(&self, other: &CapturedTransfer) -> bool {
        self.src == other.src
            && self.stream == other.stream
            && self.target.destination() == other.target.destination()
    }
}

impl Captured {
    /// What the node is, for listings: `launch`, `write`, `flush` or `transfer`.
    pub fn kind(&self) -> &'static str {
        match self {
            Captured::Op(op) => op.kind(),
            Captured::Transfer(_) => "transfer",
        }
    }

    /// A one-line description: the kernel or the bytes, and the stream.
    pub fn describe(&self) -> String {
        match self {
            Captured::Op(op) => op.describe(),
            Captured::Transfer(CapturedTransfer {
                src,
                stream,
                target,
            }) => {
                let (runtime, dst) = target.destination();
                format!(
                    "transfer {} bytes of handle {} on {stream} to handle {} of runtime {}",
                    src.size(),
                    src.handle(),
                    dst.handle(),
                    runtime.0
                )
            }
        }
    }
}

/// A capture in progress on one inbox: what the capturing thread queued so far.
#[derive(Debug)]
pub struct Recording {
    thread: ThreadId,
    /// The nodes recorded, in order.
    pub commands: Vec<Captured>,
    /// The number each of `commands` took from the capture's order, for merging the captures
    /// of several runtimes.
    pub order: Vec<u64>,
    numbers: CaptureOrder,
    /// The handles pinned for the graph, each once, in the order they were pinned.
    pub pinned: Vec<HandleId>,
    pinned_set: rustc_hash::FxHashSet<HandleId>,
    /// The first call refused, which fails the capture.
    pub refused: Option<Error>,
    /// A dry recording keeps the launches, writes and flushes it records instead of queueing
    /// them (allocations, pins and releases are queued as always).
    dry: bool,
}

impl Recording {
    /// A recording of what the calling thread queues.
    pub fn on_this_thread() -> Recording {
        Recording::ordered_by(CaptureOrder::default())
    }

    /// A recording of what the calling thread queues, its commands numbered by `order`, which
    /// captures of other runtimes opened together share.
    pub fn ordered_by(order: CaptureOrder) -> Recording {
        Recording {
            thread: std::thread::current().id(),
            commands: Vec::new(),
            order: Vec::new(),
            numbers: order,
            pinned: Vec::new(),
            pinned_set: Default::default(),
            refused: None,
            dry: false,
        }
    }

    /// A recording of what the calling thread queues that does not queue the launches, writes
    /// and flushes it records.
    pub fn dry_on_this_thread() -> Recording {
        Recording {
            dry: true,
            ..Recording::on_this_thread()
        }
    }

    /// Whether the calling thread is the capturing one.
    pub fn is_this_thread(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// Takes `command` from the capturing thread of runtime `runtime`: records it and returns
    /// what to queue (the command, then pins for the handles it is the first to use), or refuses
    /// it.
    pub fn take(&mut self, runtime: RuntimeId, command: Command) -> SmallVec<[Command; 4]> {
        let mut queue = SmallVec::new();
        let op = match command {
            Command::Op(op) => op,
            other => {
                queue.extend(self.refuse(other));
                return queue;
            }
        };
        let (recorded, handles): (_, SmallVec<[HandleId; 4]>) = match &op {
            Op::Launch(launch) => (Some(op.clone()), launch.handles()),
            Op::Write { dst, .. } => (Some(op.clone()), smallvec![dst.handle()]),
            // Made once, in this warm-up; a replay writes its initial contents again.
            Op::Create {
                handle,
                size,
                data,
                stream,
            } => {
                let handle = *handle;
                if let Some(data) = data {
                    self.record(Op::Write {
                        dst: Binding::of_handle(handle, runtime, 0, 0, *size),
                        data: data.clone(),
                        stream: *stream,
                    });
                }
                queue.push(Command::Op(op));
                self.pin(&[handle], &mut queue);
                return queue;
            }
            Op::Flush { .. } => (Some(op.clone()), SmallVec::new()),
            // Releases, pins, cleanups and allocation modes act now and are not replayed.
            _ => (None, SmallVec::new()),
        };
        let replayed = recorded.is_some();
        if let Some(recorded) = recorded {
            self.record(recorded);
        }
        if !(replayed && self.dry) {
            queue.push(Command::Op(op));
        }
        self.pin(&handles, &mut queue);
        queue
    }

    /// Refuses a command a graph cannot replay: a read, sync or mark is answered with the error,
    /// the first refusal is kept for the capture's end, each is logged; any other command comes
    /// back.
    fn refuse(&mut self, command: Command) -> Option<Command> {
        match command {
            Command::Read { reply, .. } => {
                let error = self.refuse_call("read");
                let _ = reply.send(Err(error));
            }
            Command::Sync { reply, .. } => {
                let error = self.refuse_call("sync");
                let _ = reply.send(Err(error));
            }
            Command::Mark { reply, .. } => {
                let error = self.refuse_call("mark");
                let _ = reply.send(Err(error));
            }
            Command::Native { work, .. } => {
                self.refuse_call(work.name());
            }
            Command::WriteArriving { .. } => {
                self.refuse_call(
                    "a transfer from another runtime (capture it on the source's client)",
                );
            }
            Command::Replay { .. } => {
                self.refuse_call("replay");
            }
            other => return Some(other),
        }
        None
    }

    /// The error refusing `call` inside a capture, kept if it is the capture's first.
    fn refuse_call(&mut self, call: &'static str) -> Error {
        let error = Error::Graph(GraphError::NotCapturable { call });
        tracing::warn!(target: "gpuworld::graph", call, "refused inside a capture");
        if self.refused.is_none() {
            self.refused = Some(error.clone());
        }
        error
    }

    /// Appends `op`, numbered by the capture's order.
    fn record(&mut self, op: Op) {
        self.commands.push(Captured::Op(op));
        self.order.push(self.numbers.next());
    }

    /// Records a transfer to another runtime from the capturing thread, and returns the pin of
    /// `src`'s handle if it is the first command to use it; whether the transfer must run now too
    /// (a dry recording only records it).
    pub fn record_transfer(
        &mut self,
        src: Binding,
        stream: StreamId,
        target: Arc<dyn TransferOut>,
    ) -> (SmallVec<[Command; 4]>, bool) {
        self.commands.push(Captured::Transfer(CapturedTransfer {
            src,
            stream,
            target,
        }));
        self.order.push(self.numbers.next());
        let mut pins = SmallVec::new();
        self.pin(&[src.handle()], &mut pins);
        (pins, !self.dry)
    }

    /// Pins each of `handles` not pinned yet, behind the command that uses it.
    fn pin(&mut self, handles: &[HandleId], queue: &mut SmallVec<[Command; 4]>) {
        for &handle in handles {
            if self.pinned_set.insert(handle) {
                self.pinned.push(handle);
                queue.push(Command::Op(Op::Pin {
                    handle,
                    holder: super::PinHolder::Graph,
                }));
            }
        }
    }
}

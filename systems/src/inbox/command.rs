//! What a client queues for the next tick: a [`Command`], an [`Op`] (data) or a request that
//! carries a reply, what the inbox, the capture and ingest all take.

use super::op::Op;
use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::error::{Error, Result};
use crate::ids::StreamId;
use futures_channel::oneshot;
use smallvec::SmallVec;

/// The sending half of a reply the tick completes.
pub type Reply<T> = oneshot::Sender<T>;

/// The bytes of each binding of a read, in order.
pub type ReadReply = Result<Vec<HostBytes>>;

/// A client request, as queued for the next tick: an [`Op`] (data), or a request that carries
/// what is not data — a reply channel, bytes still arriving, a backend's own work — or a graph's
/// ops to issue again as one unit.
#[derive(Debug)]
pub enum Command {
    /// An operation on memory or streams.
    Op(Op),
    /// Copy bytes another runtime is still producing into `dst`, once they are there (a
    /// transfer's or a collective's destination); every later command waits for them.
    WriteArriving {
        /// Destination range.
        dst: Binding,
        /// The bytes, once they arrive.
        bytes: crate::arriving::Arriving,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Run work the backend runs itself (a collective through NCCL) over `buffers`.
    Native {
        /// The work.
        work: crate::backend::NativeWork,
        /// Its bindings, in the order the work names them; all count as written.
        buffers: SmallVec<[Binding; 4]>,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Read bindings back to the host.
    Read {
        /// What to read.
        sources: SmallVec<[Binding; 2]>,
        /// The stream it runs on.
        stream: StreamId,
        /// Where the bytes go.
        reply: Reply<ReadReply>,
        /// Staging the bytes land in, lent by the runtime that takes them (a transfer's
        /// destination); the backend's own when `None`.
        staging: Option<std::sync::Arc<dyn crate::staging::StagingAllocator>>,
    },
    /// Wait until the stream's work has completed.
    Sync {
        /// The stream.
        stream: StreamId,
        /// Completed when the work has run, with the stream's fault if any.
        reply: Reply<Result<()>>,
    },
    /// Flush the stream and reply with the event that follows its work so far (for device timing).
    Mark {
        /// The stream.
        stream: StreamId,
        /// The event, once the stream's earlier work is submitted.
        reply: Reply<Result<crate::backend::DeviceEvent>>,
    },
    /// A command a captured graph issues itself at a replay (a part of a transfer it
    /// recorded): it may name a handle the user released while the graph pins it, which a
    /// command of the user's may not (`BindingError::ReleasedHandle`).
    ForGraph(Box<Command>),
    /// Issue a captured graph's ops again, in order, as one unit.
    Replay {
        /// The graph's number, for traces.
        graph: u64,
        /// How many updates the graph had: a backend's compiled form of `graph` at another
        /// version is stale.
        version: u64,
        /// Its ops.
        ops: std::sync::Arc<Vec<Op>>,
    },
}

impl From<Op> for Command {
    fn from(op: Op) -> Command {
        Command::Op(op)
    }
}

impl Command {
    /// Whether a caller may block on its reply: a read or a sync.
    pub fn may_block_a_caller(&self) -> bool {
        match self {
            Command::Read { .. } | Command::Sync { .. } => true,
            Command::ForGraph(command) => command.may_block_a_caller(),
            _ => false,
        }
    }

    /// Fails the command's reply, if it has one, with `error`.
    pub fn fail(self, error: Error) {
        match self {
            Command::Read { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::Mark { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::Sync { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::ForGraph(command) => command.fail(error),
            _ => {}
        }
    }
}

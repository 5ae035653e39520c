//! Work that spans runtimes of one backend and that the backend runs on its devices itself: a
//! transfer between two of its devices ([`PeerTransfer`], CUDA's peer copies) and collectives
//! over a group of them ([`DeviceCollectives`], NCCL). A backend offers them through
//! [`Backend::peer_transfer`](crate::backend::Backend::peer_transfer) and
//! [`Backend::device_collectives`](crate::backend::Backend::device_collectives); without them the client
//! moves bytes through host memory and combines collectives on the host.

use crate::error::Error;
use crate::native::NativeWork;
use std::sync::Arc;
use std::time::Duration;

/// Ticks a runtime that nobody else ticks, without blocking on its lock: a part of a transfer
/// waiting on the other runtime's part must not depend on that runtime's owner ticking it.
pub type Drive = Box<dyn Fn() + Send + Sync>;

/// A transfer between two runtimes of one backend that stays on the devices, as three native
/// ops queued in this order, each after the one it waits for.
#[derive(Debug)]
pub struct PeerTransfer {
    /// On the destination's stream, over the destination range: makes it ready to receive.
    pub destination: NativeWork,
    /// On the source's stream, over the source binding: the copy.
    pub copy: NativeWork,
    /// On the destination's stream, over the destination range: later work waits for the copy.
    pub arrival: NativeWork,
}

/// The reduction of an `all_reduce` or `reduce_scatter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The smallest element.
    Min,
    /// The largest element.
    Max,
}

/// The element type a collective reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 16-bit brain float.
    BF16,
    /// 32-bit signed integer (sum and product wrap).
    I32,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F16 | ElemType::BF16 => 2,
        }
    }
}

/// One collective as every rank runs it, its buffers the rank task's bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectiveOp {
    /// In place over the rank's one buffer of `count` elements.
    AllReduce {
        /// The element type.
        elem: ElemType,
        /// The reduction.
        op: ReduceOp,
        /// Elements per buffer.
        count: usize,
    },
    /// In place over the rank's one buffer of `bytes`, from `root`'s.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
        /// Bytes per buffer.
        bytes: usize,
    },
    /// From the rank's input of `bytes` into its output, which holds every rank's input.
    AllGather {
        /// Bytes per input.
        bytes: usize,
    },
    /// From the rank's input into its output of `count` elements (its part of the reduction).
    ReduceScatter {
        /// The element type.
        elem: ElemType,
        /// The reduction.
        op: ReduceOp,
        /// Elements per output.
        count: usize,
    },
    /// Point-to-point transfers posted together, so that two ranks sending each other wait for
    /// nothing: the task's bindings are the buffers sent (the `i`-th to `sends[i]`), then the
    /// buffers received (the `i`-th from `recvs[i]`), each transfer a whole binding's bytes.
    PointToPoint {
        /// The rank each sent buffer goes to.
        sends: Peers,
        /// The rank each received buffer comes from.
        recvs: Peers,
    },
}

/// The ranks of a point-to-point exchange, in binding order, at most [`Peers::MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peers {
    ranks: [u32; Peers::MAX],
    len: u8,
}

impl Peers {
    /// The most transfers of one direction in one exchange.
    pub const MAX: usize = 8;

    /// `ranks` in order; `None` for more than [`Peers::MAX`] or a rank above `u32::MAX`.
    pub fn new(ranks: &[usize]) -> Option<Peers> {
        if ranks.len() > Peers::MAX {
            return None;
        }
        let mut peers = Peers {
            ranks: [0; Peers::MAX],
            len: ranks.len() as u8,
        };
        for (slot, &rank) in peers.ranks.iter_mut().zip(ranks) {
            *slot = u32::try_from(rank).ok()?;
        }
        Some(peers)
    }

    /// The ranks, in order.
    pub fn ranks(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.ranks[..self.len as usize].iter().map(|&r| r as usize)
    }

    /// How many ranks.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// How a group's collectives in flight stand: what a watchdog of a group across processes looks
/// at to end collectives that would otherwise wait forever.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectiveHealth {
    /// Collectives queued on this rank's device that have not completed.
    pub in_flight: usize,
    /// How long the oldest of them has been queued.
    pub oldest: Option<Duration>,
    /// An error the collectives' library reported on its own (NCCL's asynchronous error).
    pub error: Option<String>,
}

/// A group of devices of one backend that runs collectives on the devices themselves (NCCL's
/// communicators), made once per group at its first collective.
pub trait DeviceCollectives: Send + Sync {
    /// Rank `rank`'s part of `op`: native work for that rank's stream; an error for a rank
    /// or an op the group does not have.
    fn rank_work(&self, rank: usize, op: CollectiveOp) -> Result<NativeWork, Error>;

    /// How the group's collectives in flight stand; nothing in flight by default.
    fn health(&self) -> CollectiveHealth {
        CollectiveHealth::default()
    }

    /// Refuses the group's later collectives with `reason` (a rank left); those in flight go
    /// on. Nothing by default.
    fn close(&self, _reason: &str) {}

    /// Ends the group's collectives in flight (their results are undefined, and the streams that
    /// ran them report `reason`) and refuses later ones. Nothing by default.
    fn abort(&self, _reason: &str) {}
}

/// Collectives across processes on a backend's devices: a group made by rank 0's
/// [`ProcessCollectives::group_id`], which every rank then joins with it (NCCL's unique id and
/// `ncclCommInitRank`).
pub trait ProcessCollectives: Send + Sync {
    /// A new group's id, made by rank 0 and handed to every rank.
    fn group_id(&self) -> Result<Vec<u8>, Error>;

    /// This process's member of the group `id` names: rank `rank` of `world`, on the backend's
    /// device `device`. Blocks until every rank has joined.
    fn join(
        &self,
        device: u32,
        id: &[u8],
        rank: usize,
        world: usize,
    ) -> Result<Arc<dyn DeviceCollectives>, Error>;
}

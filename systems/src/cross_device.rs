//! Work that spans runtimes of one backend and that the backend runs on its devices itself: a
//! transfer between two of its devices ([`PeerTransfer`], CUDA's peer copies) and collectives
//! over a group of them ([`DeviceCollectives`], NCCL). A backend offers them through
//! [`Backend::peer_transfer`](crate::Backend::peer_transfer) and
//! [`Backend::device_collectives`](crate::Backend::device_collectives); without them the client
//! moves bytes through host memory and combines collectives on the host.

use crate::error::Error;
use crate::native::NativeWork;

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
}

/// A group of devices of one backend that runs collectives on the devices themselves (NCCL's
/// communicators), made once per group at its first collective.
pub trait DeviceCollectives: Send + Sync {
    /// Rank `rank`'s part of `op`: native work for that rank's stream; an error for a rank
    /// or an op the group does not have.
    fn rank_work(&self, rank: usize, op: CollectiveOp) -> Result<NativeWork, Error>;
}

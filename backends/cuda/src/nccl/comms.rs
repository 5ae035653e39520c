//! One rank's communicator, a group of them in this process, and the collective calls a task
//! enqueues.

use super::clique::Clique;
use super::library::{Nccl, nccl, unavailable};
use cudarc::driver::sys as cu;
use cudarc::nccl::sys;
use gpuworld_hal::backend::{NativeOp, NativeWork, Region};
use gpuworld_hal::cross_device::{CollectiveOp, DeviceCollectives, ElemType, Peers, ReduceOp};
use gpuworld_hal::error::{CollectiveError, Error};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// One rank's NCCL communicator.
#[derive(Debug)]
pub struct NcclComm {
    /// The communicators made with this one.
    pub clique: Arc<Clique>,
    /// The rank's CUDA ordinal.
    pub device: u32,
    /// The rank.
    pub rank: usize,
    /// Where its communicator is in the clique's list: the rank within one process, 0 for a rank
    /// of a group across processes.
    pub slot: usize,
    /// Ranks in the communicator.
    pub ranks: usize,
}

/// One communicator per ordinal of `devices`, rank `r` on `devices[r]`, in this process.
pub fn communicators(devices: &[u32]) -> Result<Vec<Arc<NcclComm>>, Error> {
    let nccl = nccl()?;
    crate::loader::driver().map_err(unavailable)?;
    let ordinals: Vec<c_int> = devices
        .iter()
        .map(|&d| c_int::try_from(d).unwrap_or(c_int::MAX))
        .collect();
    let count = c_int::try_from(ordinals.len()).unwrap_or(c_int::MAX);
    let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); ordinals.len()];
    // SAFETY: `comms` has room for one communicator per ordinal; `ordinals` lists them.
    let code = unsafe { (nccl.comm_init_all)(comms.as_mut_ptr(), count, ordinals.as_ptr()) };
    nccl.check(code, "ncclCommInitAll").map_err(unavailable)?;
    let ranks = comms.len();
    let clique = Arc::new(Clique::new(comms, None));
    Ok(devices
        .iter()
        .enumerate()
        .map(|(rank, &device)| {
            Arc::new(NcclComm {
                clique: clique.clone(),
                device,
                rank,
                slot: rank,
                ranks,
            })
        })
        .collect())
}

/// The communicators of a group, one per rank: the CUDA backend's [`DeviceCollectives`].
#[derive(Debug)]
pub struct NcclGroup(pub Vec<Arc<NcclComm>>);

impl DeviceCollectives for NcclGroup {
    fn rank_work(&self, rank: usize, op: CollectiveOp) -> Result<NativeWork, Error> {
        let comm = self.0.get(rank).cloned().ok_or_else(|| {
            Error::Collective(CollectiveError::MismatchedBuffers {
                op: "nccl",
                reason: format!("rank {rank} in a group of {}", self.0.len()).into(),
            })
        })?;
        let bytes = sys::ncclDataType_t::ncclUint8;
        let (kind, dtype, count) = match op {
            CollectiveOp::AllReduce { elem, op, count } => {
                (NcclKind::AllReduce(red_op(op)), dtype(elem), count)
            }
            CollectiveOp::Broadcast { root, bytes: n } => (NcclKind::Broadcast { root }, bytes, n),
            CollectiveOp::AllGather { bytes: n } => (NcclKind::AllGather, bytes, n),
            CollectiveOp::ReduceScatter { elem, op, count } => {
                (NcclKind::ReduceScatter(red_op(op)), dtype(elem), count)
            }
            CollectiveOp::PointToPoint { sends, recvs } => {
                (NcclKind::PointToPoint { sends, recvs }, bytes, 0)
            }
            other => {
                return Err(Error::Collective(CollectiveError::MismatchedBuffers {
                    op: "nccl",
                    reason: format!("NCCL does not run {other:?}").into(),
                }));
            }
        };
        Ok(Box::new(NcclCall {
            comm,
            kind,
            dtype,
            count,
        }))
    }
}

/// The element type of point-to-point transfers: bytes.
pub(super) fn bytes_type() -> sys::ncclDataType_t {
    sys::ncclDataType_t::ncclUint8
}

/// NCCL's name of `elem`.
pub(super) fn dtype(elem: ElemType) -> sys::ncclDataType_t {
    match elem {
        ElemType::F32 => sys::ncclDataType_t::ncclFloat32,
        ElemType::F16 => sys::ncclDataType_t::ncclFloat16,
        ElemType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        ElemType::I32 => sys::ncclDataType_t::ncclInt32,
    }
}

/// NCCL's name of `op`.
pub(super) fn red_op(op: ReduceOp) -> sys::ncclRedOp_t {
    match op {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
        ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
        ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
    }
}

/// Which collective an [`NcclCall`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclKind {
    /// In place over the task's one binding.
    AllReduce(sys::ncclRedOp_t),
    /// In place over the task's one binding, from `root`.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
    },
    /// From the task's first binding into its second (`ranks` times as large).
    AllGather,
    /// From the task's first binding into its second (a `ranks`-th of it).
    ReduceScatter(sys::ncclRedOp_t),
    /// Sends of the task's first `sends.len()` bindings, receives into the rest, posted
    /// together (`ncclGroupStart`/`ncclGroupEnd`), each a whole binding's bytes.
    PointToPoint {
        /// The rank each sent binding goes to.
        sends: Peers,
        /// The rank each received binding comes from.
        recvs: Peers,
    },
}

/// One rank's part of a collective: the task a runtime enqueues on its stream.
#[derive(Debug)]
pub struct NcclCall {
    /// The rank's communicator.
    pub comm: Arc<NcclComm>,
    /// The collective.
    pub kind: NcclKind,
    /// The element type.
    pub dtype: sys::ncclDataType_t,
    /// Elements per rank: the buffer's for all_reduce and broadcast, the input's for
    /// all_gather, the output's for reduce_scatter.
    pub count: usize,
}

impl NativeOp for NcclCall {
    fn name(&self) -> &'static str {
        match self.kind {
            NcclKind::AllReduce(_) => "nccl all_reduce",
            NcclKind::Broadcast { .. } => "nccl broadcast",
            NcclKind::AllGather => "nccl all_gather",
            NcclKind::ReduceScatter(_) => "nccl reduce_scatter",
            NcclKind::PointToPoint { .. } => "nccl send/recv",
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Why `call` cannot run: its group's communicator was aborted or closed.
pub(super) fn refused_message(call: &NcclCall) -> String {
    let reason = call
        .comm
        .clique
        .refused()
        .unwrap_or_else(|| "no such rank".into());
    match call.comm.clique.aborted() {
        Some(_) => aborted_message(call.name(), &reason),
        None => format!(
            "{} was refused: its group's NCCL communicator is closed because {reason}",
            call.name()
        ),
    }
}

/// Enqueues `call` through `nccl` on `comm` and `stream`, its buffers' device addresses from
/// `pointer` (their sizes from `buffers`): NCCL's result, or why a buffer has no address.
///
/// # Safety
/// The pointers must be live allocations of this device covering the task's regions, sized for
/// the call; `stream` this context's stream; `comm` this device's communicator, live (not
/// aborted) until this returns.
pub(super) unsafe fn enqueue(
    nccl: &Nccl,
    call: &NcclCall,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
    buffers: &[Region],
    pointer: &dyn Fn(usize) -> Result<cu::CUdeviceptr, Error>,
) -> Result<sys::ncclResult_t, Error> {
    // SAFETY: as the caller promises.
    Ok(unsafe {
        match call.kind {
            NcclKind::AllReduce(op) => {
                let p = pointer(0)?;
                (nccl.all_reduce)(
                    p as *const c_void,
                    p as *mut c_void,
                    call.count,
                    call.dtype,
                    op,
                    comm,
                    stream,
                )
            }
            NcclKind::Broadcast { root } => {
                let p = pointer(0)?;
                let root = c_int::try_from(root).unwrap_or(c_int::MAX);
                (nccl.broadcast)(
                    p as *const c_void,
                    p as *mut c_void,
                    call.count,
                    call.dtype,
                    root,
                    comm,
                    stream,
                )
            }
            NcclKind::AllGather => {
                let (src, dst) = (pointer(0)?, pointer(1)?);
                (nccl.all_gather)(
                    src as *const c_void,
                    dst as *mut c_void,
                    call.count,
                    call.dtype,
                    comm,
                    stream,
                )
            }
            NcclKind::ReduceScatter(op) => {
                let (src, dst) = (pointer(0)?, pointer(1)?);
                (nccl.reduce_scatter)(
                    src as *const c_void,
                    dst as *mut c_void,
                    call.count,
                    call.dtype,
                    op,
                    comm,
                    stream,
                )
            }
            NcclKind::PointToPoint { sends, recvs } => {
                let transfers = sends
                    .ranks()
                    .map(|peer| (nccl.send, peer))
                    .chain(recvs.ranks().map(|peer| (nccl.recv, peer)));
                let mut posted = Vec::with_capacity(sends.len() + recvs.len());
                for (i, (post, peer)) in transfers.enumerate() {
                    let len = buffers.get(i).map_or(0, |region| region.size as usize);
                    posted.push((post, pointer(i)?, len, peer));
                }
                let mut code = (nccl.group_start)();
                for (post, p, len, peer) in posted {
                    if code != sys::ncclResult_t::ncclSuccess {
                        break;
                    }
                    let peer = c_int::try_from(peer).unwrap_or(c_int::MAX);
                    code = post(p as *mut c_void, len, bytes_type(), peer, comm, stream);
                }
                let end = (nccl.group_end)();
                if code == sys::ncclResult_t::ncclSuccess {
                    end
                } else {
                    code
                }
            }
        }
    })
}

/// Whether `work` is an [`NcclCall`], and it if so.
pub(crate) fn as_nccl_call(work: &NativeWork) -> Option<&NcclCall> {
    work.as_any().downcast_ref::<NcclCall>()
}

/// The error of `what` on a rank whose clique was aborted.
pub(super) fn aborted_message(what: &str, reason: &str) -> String {
    format!(
        "{what} was aborted: the NCCL communicators of its group were aborted because {reason}; \
         the group's collectives fail from now on (make a new group)"
    )
}

/// Raw calls on a communicator, for benchmarks beside the runtime.
impl Nccl {
    /// Raw `ncclAllReduce` on a raw stream, for benchmarks beside the runtime.
    ///
    /// # Safety
    /// `send` and `recv` must be device memory of `comm`'s device holding `count` elements of
    /// `dtype`, and `stream` a live stream of that device's context.
    #[allow(clippy::too_many_arguments, reason = "NCCL's own parameters")]
    pub unsafe fn raw_all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: sys::ncclDataType_t,
        op: sys::ncclRedOp_t,
        comm: &NcclComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        let Some(comms) = comm.clique.live(comm.slot) else {
            return Err("ncclAllReduce: the communicator was aborted".into());
        };
        let raw = comms[comm.slot];
        // SAFETY: as the caller promises; `raw` is live (not aborted) while the lock is held.
        let code = unsafe {
            (self.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype,
                op,
                raw,
                stream.cast(),
            )
        };
        self.check(code, "ncclAllReduce")
    }

    /// Raw `ncclSend` of `bytes` from `send` and `ncclRecv` of as many into `recv`, both with
    /// `peer`, posted together on a raw stream: for benchmarks beside the runtime.
    ///
    /// # Safety
    /// `send` and `recv` must be device memory of `comm`'s device holding `bytes`, and `stream`
    /// a live stream of that device's context.
    pub unsafe fn raw_exchange(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        peer: usize,
        comm: &NcclComm,
        stream: *mut c_void,
    ) -> Result<(), String> {
        let Some(comms) = comm.clique.live(comm.slot) else {
            return Err("ncclSend/ncclRecv: the communicator was aborted".into());
        };
        let raw = comms[comm.slot];
        let peer = c_int::try_from(peer).unwrap_or(c_int::MAX);
        // SAFETY: as the caller promises; `raw` is live while the lock is held.
        unsafe {
            self.check((self.group_start)(), "ncclGroupStart")?;
            let sent = (self.send)(
                send as *mut c_void,
                bytes,
                bytes_type(),
                peer,
                raw,
                stream.cast(),
            );
            let received = (self.recv)(
                recv as *mut c_void,
                bytes,
                bytes_type(),
                peer,
                raw,
                stream.cast(),
            );
            self.check((self.group_end)(), "ncclGroupEnd")?;
            self.check(sent, "ncclSend")?;
            self.check(received, "ncclRecv")
        }
    }
}

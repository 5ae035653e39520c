//! NCCL for collectives between CUDA devices: communicators over a group of ordinals, and the
//! collective calls a runtime's task enqueues on its stream (`Backend::run_native`).
//!
//! The types are cudarc's (`nccl` feature); the functions are looked up here in
//! `libnccl.so.2`, loaded at run time: cudarc's own loader looks for `libnccl.so` and other
//! names but not `libnccl.so.2`, the only name NCCL's Python wheel (`nvidia-nccl-cu13`) ships,
//! and it panics when it finds none. Without the library every entry point returns
//! `DeviceError::BackendUnavailable` with the reason.

use crate::CudaBackend;
use cudarc::driver::sys as cu;
use cudarc::nccl::sys;
use gpuworld_hal::backend::{NativeOp, NativeWork, Region};
use gpuworld_hal::cross_device::{
    CollectiveHealth, CollectiveOp, DeviceCollectives, ElemType, Peers, ProcessCollectives,
    ReduceOp,
};
use gpuworld_hal::error::{CollectiveError, DeviceError, Error};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Where NCCL is looked for, in order: `GPUWORLD_NCCL_LIB` (a path), then these names on the
/// loader's search path.
const NCCL_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

type GetUniqueId = unsafe extern "C" fn(*mut sys::ncclUniqueId) -> sys::ncclResult_t;
type CommInitAll =
    unsafe extern "C" fn(*mut sys::ncclComm_t, c_int, *const c_int) -> sys::ncclResult_t;
type CommInitRank = unsafe extern "C" fn(
    *mut sys::ncclComm_t,
    c_int,
    sys::ncclUniqueId,
    c_int,
) -> sys::ncclResult_t;
type CommGetAsyncError =
    unsafe extern "C" fn(sys::ncclComm_t, *mut sys::ncclResult_t) -> sys::ncclResult_t;
type PeerCall = unsafe extern "C" fn(
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
type CommDestroy = unsafe extern "C" fn(sys::ncclComm_t) -> sys::ncclResult_t;
type CommAbort = CommDestroy;
type GetErrorString = unsafe extern "C" fn(sys::ncclResult_t) -> *const c_char;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclRedOp_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
type ReduceScatter = AllReduce;
type GroupCall = unsafe extern "C" fn() -> sys::ncclResult_t;

/// NCCL's entry points, resolved once from the loaded library.
#[derive(Debug)]
pub struct Nccl {
    _library: libloading::Library,
    get_unique_id: GetUniqueId,
    comm_init_all: CommInitAll,
    comm_init_rank: CommInitRank,
    comm_get_async_error: CommGetAsyncError,
    comm_destroy: CommDestroy,
    comm_abort: CommAbort,
    get_error_string: GetErrorString,
    all_reduce: AllReduce,
    broadcast: Broadcast,
    all_gather: AllGather,
    reduce_scatter: ReduceScatter,
    group_start: GroupCall,
    group_end: GroupCall,
    /// `ncclSend` (its buffer is read only; NCCL declares it `const`).
    send: PeerCall,
    recv: PeerCall,
}

fn unavailable(reason: impl Into<Arc<str>>) -> Error {
    Error::Device(DeviceError::BackendUnavailable {
        backend: "cuda",
        reason: reason.into(),
    })
}

/// NCCL, loaded once; `DeviceError::BackendUnavailable` (never a panic) when it cannot be.
pub fn nccl() -> Result<&'static Nccl, Error> {
    static NCCL: OnceLock<Result<Nccl, Arc<str>>> = OnceLock::new();
    NCCL.get_or_init(load)
        .as_ref()
        .map_err(|reason| unavailable(reason.clone()))
}

fn load() -> Result<Nccl, Arc<str>> {
    let from_env = std::env::var("GPUWORLD_NCCL_LIB").ok();
    let candidates: Vec<String> = from_env
        .into_iter()
        .chain(NCCL_NAMES.iter().map(|name| name.to_string()))
        .collect();
    // SAFETY: dlopen of NCCL runs only its initialisers.
    let library = candidates
        .iter()
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
        .ok_or_else(|| {
            format!(
                "NCCL could not be loaded (tried {}): install it (e.g. `pip install \
                 nvidia-nccl-cu13`) and put its lib/ on LD_LIBRARY_PATH, or set \
                 GPUWORLD_NCCL_LIB to the library's path",
                candidates.join(", ")
            )
        })?;
    /// The symbol `name` of `library` as a function of type `F`.
    ///
    /// # Safety
    /// `F` must be the symbol's C signature.
    unsafe fn symbol<F: Copy>(library: &libloading::Library, name: &str) -> Result<F, Arc<str>> {
        // SAFETY: the caller names the symbol's type.
        unsafe { library.get::<F>(name.as_bytes()) }
            .map(|symbol| *symbol)
            .map_err(|error| format!("NCCL lacks `{name}`: {error}").into())
    }
    // SAFETY: each type above is the C signature of the function it is looked up as (nccl.h).
    unsafe {
        Ok(Nccl {
            get_unique_id: symbol(&library, "ncclGetUniqueId")?,
            comm_init_all: symbol(&library, "ncclCommInitAll")?,
            comm_init_rank: symbol(&library, "ncclCommInitRank")?,
            comm_get_async_error: symbol(&library, "ncclCommGetAsyncError")?,
            comm_destroy: symbol(&library, "ncclCommDestroy")?,
            comm_abort: symbol(&library, "ncclCommAbort")?,
            get_error_string: symbol(&library, "ncclGetErrorString")?,
            all_reduce: symbol(&library, "ncclAllReduce")?,
            broadcast: symbol(&library, "ncclBroadcast")?,
            all_gather: symbol(&library, "ncclAllGather")?,
            reduce_scatter: symbol(&library, "ncclReduceScatter")?,
            group_start: symbol(&library, "ncclGroupStart")?,
            group_end: symbol(&library, "ncclGroupEnd")?,
            send: symbol(&library, "ncclSend")?,
            recv: symbol(&library, "ncclRecv")?,
            _library: library,
        })
    }
}

impl Nccl {
    /// `code` as an error naming `what`, or `Ok`.
    fn check(&self, code: sys::ncclResult_t, what: &str) -> Result<(), String> {
        if code == sys::ncclResult_t::ncclSuccess {
            return Ok(());
        }
        // SAFETY: NCCL returns a static, NUL-terminated string for every result code.
        let text = unsafe { CStr::from_ptr((self.get_error_string)(code)) };
        Err(format!("{what}: {} ({code:?})", text.to_string_lossy()))
    }

    /// A fresh unique id, for communicators across processes.
    pub fn unique_id(&self) -> Result<sys::ncclUniqueId, Error> {
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid out-pointer.
        let code = unsafe { (self.get_unique_id)(&mut id) };
        self.check(code, "ncclGetUniqueId").map_err(unavailable)?;
        Ok(id)
    }

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
}

impl Nccl {
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

/// The communicators made together by one `ncclCommInitAll`, one per rank. When one rank's
/// device fails, the others' collectives would wait for it forever on their GPUs: the failing
/// rank's backend aborts the clique (`ncclCommAbort` on every communicator, which ends the
/// collectives in flight), and every rank's later collectives, and its next read or sync of a
/// stream that ran one, fail with the reason instead of hanging (issue 30).
pub struct Clique {
    /// The communicators by rank, freed by the abort or, without one, by `Drop`. Enqueuing a
    /// collective holds the lock shared and checks `aborted` under it, so no call starts on an
    /// aborted communicator, and the abort waits (briefly) for calls that started before it.
    comms: parking_lot::RwLock<Vec<sys::ncclComm_t>>,
    /// Why the clique was aborted, once it was.
    aborted: OnceLock<Arc<str>>,
    /// Why the clique takes no more collectives (a rank left), once it does not; those in flight
    /// go on.
    closed: OnceLock<Arc<str>>,
    /// For a clique spanning processes: the collectives queued and not yet seen complete, which
    /// the process group's watchdog looks at (`Clique::health`).
    watched: Option<Watched>,
}

/// The collectives in flight of a clique spanning processes: an event recorded after each, and
/// when it was queued.
struct Watched {
    /// The context of the rank's device, made current by the watchdog's thread to query events.
    context: cu::CUcontext,
    in_flight: parking_lot::Mutex<Vec<(cu::CUevent, Instant)>>,
}

/// How long an abort waits for collectives being enqueued to leave NCCL. One that stays longer is
/// blocked inside NCCL (its queue full of work that waits for the failed rank), which is what
/// `ncclCommAbort` from another thread is for: the abort then goes ahead under it.
const ABORT_WAIT: Duration = Duration::from_secs(1);

// SAFETY: NCCL communicators may be used from any thread, one call at a time per communicator
// (each rank's is used by its runtime's ticking thread); `ncclCommAbort` may be called from
// another thread during a call, to end it. Each communicator is freed once: by the abort, or by
// `Drop` when there was none.
unsafe impl Send for Clique {}
// SAFETY: as above; shared references read the pointers under the lock.
unsafe impl Sync for Clique {}

impl std::fmt::Debug for Clique {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clique")
            .field("ranks", &self.comms.read().len())
            .field("aborted", &self.aborted.get())
            .finish()
    }
}

impl Clique {
    /// A clique of `comms`, by rank (one communicator, for a rank of a group across processes,
    /// with `watched` the context its collectives' events are queried in).
    fn new(comms: Vec<sys::ncclComm_t>, watched: Option<cu::CUcontext>) -> Clique {
        Clique {
            comms: parking_lot::RwLock::new(comms),
            aborted: OnceLock::new(),
            closed: OnceLock::new(),
            watched: watched.map(|context| Watched {
                context,
                in_flight: parking_lot::Mutex::new(Vec::new()),
            }),
        }
    }

    /// Why the clique was aborted, if it was.
    pub fn aborted(&self) -> Option<Arc<str>> {
        self.aborted.get().cloned()
    }

    /// Why the clique takes no more collectives, if it does not: aborted, or closed.
    pub fn refused(&self) -> Option<Arc<str>> {
        self.aborted().or_else(|| self.closed.get().cloned())
    }

    /// Refuses later collectives with `reason`; those in flight go on.
    pub fn close(&self, reason: &str) {
        if self.closed.set(reason.into()).is_ok() {
            tracing::info!(target: "gpuworld::collective", %reason, "NCCL communicator closed");
        }
    }

    /// Records an event after the collective just queued on `stream`, for the watchdog.
    fn watch_after(&self, stream: cu::CUstream) {
        let Some(watched) = &self.watched else { return };
        let mut event = std::ptr::null_mut();
        // SAFETY: creates an event in the current context (the caller's device's), recorded on
        // that context's stream; destroyed by `health` once passed, or by `Drop`.
        unsafe {
            let flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            if cu::cuEventCreate(&mut event, flags) != cu::CUresult::CUDA_SUCCESS {
                tracing::warn!(target: "gpuworld::collective", "no event after a collective: the watchdog cannot time it out");
                return;
            }
            let code = cu::cuEventRecord(event, stream);
            if code != cu::CUresult::CUDA_SUCCESS {
                cu::cuEventDestroy_v2(event);
                tracing::warn!(target: "gpuworld::collective", ?code, "no event after a collective: the watchdog cannot time it out");
                return;
            }
        }
        watched.in_flight.lock().push((event, Instant::now()));
    }

    /// The collectives in flight and NCCL's asynchronous error, for the watchdog.
    fn health(&self, slot: usize) -> CollectiveHealth {
        let mut health = CollectiveHealth::default();
        if let Some(watched) = &self.watched {
            crate::bind_context(watched.context);
            let mut in_flight = watched.in_flight.lock();
            // SAFETY: the events were made by `watch_after` and are destroyed only here.
            in_flight.retain(|&(event, _)| unsafe {
                if cu::cuEventQuery(event) == cu::CUresult::CUDA_ERROR_NOT_READY {
                    true
                } else {
                    cu::cuEventDestroy_v2(event);
                    false
                }
            });
            health.in_flight = in_flight.len();
            health.oldest = in_flight.first().map(|(_, queued)| queued.elapsed());
        }
        let (Ok(nccl), Some(comms)) = (nccl(), self.live(slot)) else {
            return health;
        };
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live while the lock is held; `state` is an out-pointer.
        let code = unsafe { (nccl.comm_get_async_error)(comms[slot], &mut state) };
        drop(comms);
        health.error = nccl
            .check(code, "ncclCommGetAsyncError")
            .and_then(|()| match state {
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
                failed => nccl.check(failed, "NCCL"),
            })
            .err();
        health
    }

    /// Aborts every communicator of the clique, once: collectives in flight on any rank end
    /// (their results are undefined) and later ones are refused with `reason`.
    pub fn abort(&self, reason: &str) {
        if self.aborted.set(reason.into()).is_err() {
            return;
        }
        tracing::error!(target: "gpuworld::collective", %reason, "NCCL communicators aborted");
        let Ok(nccl) = nccl() else { return };
        // No call starts once the flag is up; wait for those that started before it.
        let exclusive = self.comms.try_write_for(ABORT_WAIT);
        let comms: Vec<sys::ncclComm_t> = match &exclusive {
            Some(comms) => comms.to_vec(),
            None => {
                tracing::warn!(target: "gpuworld::collective", "a collective is blocked inside NCCL: aborting under it");
                self.comms.read().to_vec()
            }
        };
        for comm in comms {
            // SAFETY: made by `ncclCommInitAll` and freed only here (the flag, set once above,
            // keeps `Drop` from freeing it again); a call still inside NCCL on it is what the
            // abort ends.
            let code = unsafe { (nccl.comm_abort)(comm) };
            if let Err(message) = nccl.check(code, "ncclCommAbort") {
                tracing::warn!(target: "gpuworld::collective", %message, "abort failed");
            }
        }
    }

    /// The raw communicator of `rank`, under the lock, unless the clique was aborted.
    fn live(&self, slot: usize) -> Option<parking_lot::RwLockReadGuard<'_, Vec<sys::ncclComm_t>>> {
        let comms = self.comms.read();
        (self.refused().is_none() && slot < comms.len()).then_some(comms)
    }
}

impl Drop for Clique {
    fn drop(&mut self) {
        if let Some(watched) = &mut self.watched {
            crate::bind_context(watched.context);
            for (event, _) in watched.in_flight.get_mut().drain(..) {
                // SAFETY: made by `watch_after`; destroying a pending event is allowed (its
                // resources go once it passes).
                unsafe { cu::cuEventDestroy_v2(event) };
            }
        }
        if self.aborted.get().is_some() {
            // The abort freed them.
            return;
        }
        let Ok(nccl) = nccl() else { return };
        // A closed group lost a rank: a destroy could wait for it, an abort does not.
        let free = match self.closed.get() {
            Some(_) => nccl.comm_abort,
            None => nccl.comm_destroy,
        };
        for comm in self.comms.get_mut().iter() {
            // SAFETY: made by `ncclCommInitAll` or `ncclCommInitRank`, not aborted, and no rank
            // holds it any more.
            unsafe { free(*comm) };
        }
    }
}

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
fn bytes_type() -> sys::ncclDataType_t {
    sys::ncclDataType_t::ncclUint8
}

/// NCCL's name of `elem`.
fn dtype(elem: ElemType) -> sys::ncclDataType_t {
    match elem {
        ElemType::F32 => sys::ncclDataType_t::ncclFloat32,
        ElemType::F16 => sys::ncclDataType_t::ncclFloat16,
        ElemType::BF16 => sys::ncclDataType_t::ncclBfloat16,
        ElemType::I32 => sys::ncclDataType_t::ncclInt32,
    }
}

/// NCCL's name of `op`.
fn red_op(op: ReduceOp) -> sys::ncclRedOp_t {
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
fn refused_message(call: &NcclCall) -> String {
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
unsafe fn enqueue(
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

impl CudaBackend {
    /// Enqueues `call` on stream `s` over the task's regions.
    pub(crate) fn run_nccl(
        &mut self,
        s: usize,
        buffers: &[Region],
        call: &NcclCall,
    ) -> Result<(), Error> {
        let stream_id = self.streams[s].id;
        let fault = |message: String| Error::device_fault(stream_id, message);
        let nccl = nccl()?;
        if call.comm.device != crate::Backend::device_index(self) {
            return Err(fault(format!(
                "an NCCL communicator of device {} used on device {}",
                call.comm.device,
                crate::Backend::device_index(self)
            )));
        }
        self.note_collective(s, &call.comm.clique);
        let stream: sys::cudaStream_t = self.work_stream(s).cast();
        let pointer = |i: usize| {
            buffers
                .get(i)
                .and_then(|region| self.region_pointer(*region))
                .ok_or_else(|| fault(format!("{} bound to freed or missing memory", call.name())))
        };
        // Held shared while the call is enqueued: an abort waits for it (briefly), then frees.
        let Some(comms) = call.comm.clique.live(call.comm.slot) else {
            return Err(fault(refused_message(call)));
        };
        let comm = comms[call.comm.slot];
        self.bind();
        // SAFETY: the pointers are live allocations of this device covering the task's
        // regions, whose sizes the client checked against `count` and the group's size;
        // `stream` is this context's stream; `comm` is this device's communicator, live (not
        // aborted) while the lock is held.
        let code = unsafe { enqueue(nccl, call, comm, stream, buffers, &pointer)? };
        drop(comms);
        nccl.check(code, call.name()).map_err(fault)?;
        call.comm.clique.watch_after(stream.cast());
        Ok(())
    }

    /// Remembers that stream `s` ran a collective of `clique`, so that an abort of the clique
    /// faults the stream (its collective's result is undefined) and a failure of this device
    /// aborts the clique.
    pub(crate) fn note_collective(&mut self, s: usize, clique: &Arc<Clique>) {
        let known = self
            .cliques
            .iter_mut()
            .find(|known| std::ptr::eq(known.clique.as_ptr(), Arc::as_ptr(clique)));
        match known {
            Some(known) => {
                if !known.streams.contains(&s) {
                    known.streams.push(s);
                }
            }
            None => self.cliques.push(KnownClique {
                clique: Arc::downgrade(clique),
                streams: vec![s],
                reported: false,
            }),
        }
        self.cliques.retain(|known| known.clique.strong_count() > 0);
    }

    /// Faults the streams that ran collectives of a clique another rank aborted, once per
    /// clique: their next read or sync reports it.
    pub(crate) fn notice_aborted_cliques(&mut self) {
        let mut faults = Vec::new();
        for known in &mut self.cliques {
            if known.reported {
                continue;
            }
            let Some(reason) = known.clique.upgrade().and_then(|clique| clique.aborted()) else {
                continue;
            };
            known.reported = true;
            for &s in &known.streams {
                faults.push((s, aborted_message("a collective", &reason)));
            }
        }
        for (s, message) in faults {
            self.fault(s, message);
        }
    }

    /// This device failed (`reason`): aborts every clique it ran collectives in, so the other
    /// ranks' collectives end instead of waiting for this one forever.
    pub(crate) fn abort_cliques(&mut self, reason: &str) {
        let device = crate::Backend::device_index(self);
        for known in &mut self.cliques {
            known.reported = true;
            if let Some(clique) = known.clique.upgrade() {
                clique.abort(&format!("GPU {device} failed: {reason}"));
            }
        }
    }
}

/// A clique this backend ran collectives in, and on which streams.
#[derive(Debug)]
pub(crate) struct KnownClique {
    clique: std::sync::Weak<Clique>,
    streams: Vec<usize>,
    /// Whether its abort was noticed (or caused) here already.
    reported: bool,
}

/// The error of `what` on a rank whose clique was aborted.
fn aborted_message(what: &str, reason: &str) -> String {
    format!(
        "{what} was aborted: the NCCL communicators of its group were aborted because {reason}; \
         the group's collectives fail from now on (make a new group)"
    )
}

/// NCCL across processes: rank 0's unique id, and `ncclCommInitRank` on every rank (the CUDA
/// backend's [`ProcessCollectives`]).
#[derive(Debug)]
pub struct NcclProcesses;

impl ProcessCollectives for NcclProcesses {
    fn group_id(&self) -> Result<Vec<u8>, Error> {
        let id = nccl()?.unique_id()?;
        Ok(id.internal.iter().map(|&b| b as u8).collect())
    }

    fn join(
        &self,
        device: u32,
        id: &[u8],
        rank: usize,
        world: usize,
    ) -> Result<Arc<dyn DeviceCollectives>, Error> {
        let comm = process_communicator(device, id, rank, world)?;
        Ok(Arc::new(NcclProcessGroup(comm)))
    }
}

/// This process's communicator of the NCCL group `id` names (rank 0's
/// [`ProcessCollectives::group_id`]): rank `rank` of `world` on GPU `device`. Blocks until every
/// rank has joined.
pub fn process_communicator(
    device: u32,
    id: &[u8],
    rank: usize,
    world: usize,
) -> Result<Arc<NcclComm>, Error> {
    let nccl = nccl()?;
    let driver_error = |what: &str, code: cu::CUresult| {
        unavailable(format!(
            "{what} for NCCL on GPU {device}: {}",
            crate::loader::describe(crate::faults::sys_error(code))
        ))
    };
    crate::loader::driver().map_err(unavailable)?;
    let mut unique = sys::ncclUniqueId { internal: [0; 128] };
    if id.len() != unique.internal.len() {
        return Err(unavailable(format!(
            "an NCCL unique id has {} bytes, not {}",
            unique.internal.len(),
            id.len()
        )));
    }
    for (to, &from) in unique.internal.iter_mut().zip(id) {
        *to = from as c_char;
    }
    let (Ok(nranks), Ok(me)) = (c_int::try_from(world), c_int::try_from(rank)) else {
        return Err(unavailable(format!(
            "rank {rank} of {world} is beyond NCCL's ranks"
        )));
    };
    let ordinal = c_int::try_from(device).unwrap_or(c_int::MAX);
    let mut handle = 0;
    let mut context = std::ptr::null_mut();
    // SAFETY: out-pointers; the primary context is retained for the communicator's life (the
    // clique keeps it; released never: the process's backend holds it too, and the driver
    // counts retains).
    unsafe {
        let code = cu::cuDeviceGet(&mut handle, ordinal);
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuDeviceGet", code));
        }
        let code = cu::cuDevicePrimaryCtxRetain(&mut context, handle);
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuDevicePrimaryCtxRetain", code));
        }
    }
    crate::bind_context(context);
    let mut comm = std::ptr::null_mut();
    // SAFETY: `comm` is an out-pointer; `unique` came from rank 0's `ncclGetUniqueId`; NCCL
    // takes the device from the current context, bound above.
    let code = unsafe { (nccl.comm_init_rank)(&mut comm, nranks, unique, me) };
    nccl.check(code, "ncclCommInitRank").map_err(unavailable)?;
    let clique = Arc::new(Clique::new(vec![comm], Some(context)));
    Ok(Arc::new(NcclComm {
        clique,
        device,
        rank,
        slot: 0,
        ranks: world,
    }))
}

/// This process's rank of an NCCL group spanning processes: its [`DeviceCollectives`].
#[derive(Debug)]
pub struct NcclProcessGroup(pub Arc<NcclComm>);

impl DeviceCollectives for NcclProcessGroup {
    fn rank_work(&self, rank: usize, op: CollectiveOp) -> Result<NativeWork, Error> {
        if rank != self.0.rank {
            return Err(Error::Collective(CollectiveError::MismatchedBuffers {
                op: "nccl",
                reason: format!("rank {rank}'s part asked of rank {}", self.0.rank).into(),
            }));
        }
        // The process's one communicator, whatever its rank.
        NcclGroup(vec![self.0.clone()]).rank_work(0, op)
    }

    fn health(&self) -> CollectiveHealth {
        self.0.clique.health(self.0.slot)
    }

    fn close(&self, reason: &str) {
        self.0.clique.close(reason);
    }

    fn abort(&self, reason: &str) {
        self.0.clique.abort(reason);
    }
}

/// Runs `f` between `ncclGroupStart` and `ncclGroupEnd`: how one thread issues the calls of
/// several ranks without deadlock.
pub fn grouped<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    let nccl = nccl()?;
    // SAFETY: group calls take no arguments and nest.
    let code = unsafe { (nccl.group_start)() };
    nccl.check(code, "ncclGroupStart").map_err(unavailable)?;
    let result = f();
    // SAFETY: as above, closing the group opened here.
    let code = unsafe { (nccl.group_end)() };
    nccl.check(code, "ncclGroupEnd").map_err(unavailable)?;
    Ok(result)
}

/// Whether `work` is an [`NcclCall`], and it if so.
pub(crate) fn as_nccl_call(work: &NativeWork) -> Option<&NcclCall> {
    work.as_any().downcast_ref::<NcclCall>()
}

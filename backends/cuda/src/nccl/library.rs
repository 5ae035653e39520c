//! Loading NCCL: its functions looked up in `libnccl.so.2` at run time, and its results as errors.

use cudarc::nccl::sys;
use gpuworld_hal::error::{DeviceError, Error};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, OnceLock};

/// Where NCCL is looked for, in order: `GPUWORLD_NCCL_LIB` (a path), then these names on the
/// loader's search path.
pub(super) const NCCL_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

pub(super) type GetUniqueId = unsafe extern "C" fn(*mut sys::ncclUniqueId) -> sys::ncclResult_t;
pub(super) type CommInitAll =
    unsafe extern "C" fn(*mut sys::ncclComm_t, c_int, *const c_int) -> sys::ncclResult_t;
pub(super) type CommInitRank = unsafe extern "C" fn(
    *mut sys::ncclComm_t,
    c_int,
    sys::ncclUniqueId,
    c_int,
) -> sys::ncclResult_t;
pub(super) type CommGetAsyncError =
    unsafe extern "C" fn(sys::ncclComm_t, *mut sys::ncclResult_t) -> sys::ncclResult_t;
pub(super) type PeerCall = unsafe extern "C" fn(
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
pub(super) type CommDestroy = unsafe extern "C" fn(sys::ncclComm_t) -> sys::ncclResult_t;
pub(super) type CommAbort = CommDestroy;
pub(super) type GetErrorString = unsafe extern "C" fn(sys::ncclResult_t) -> *const c_char;
pub(super) type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclRedOp_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
pub(super) type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
pub(super) type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
pub(super) type ReduceScatter = AllReduce;
pub(super) type GroupCall = unsafe extern "C" fn() -> sys::ncclResult_t;

/// NCCL's entry points, resolved once from the loaded library.
#[derive(Debug)]
pub struct Nccl {
    pub(super) _library: libloading::Library,
    pub(super) get_unique_id: GetUniqueId,
    pub(super) comm_init_all: CommInitAll,
    pub(super) comm_init_rank: CommInitRank,
    pub(super) comm_get_async_error: CommGetAsyncError,
    pub(super) comm_destroy: CommDestroy,
    pub(super) comm_abort: CommAbort,
    pub(super) get_error_string: GetErrorString,
    pub(super) all_reduce: AllReduce,
    pub(super) broadcast: Broadcast,
    pub(super) all_gather: AllGather,
    pub(super) reduce_scatter: ReduceScatter,
    pub(super) group_start: GroupCall,
    pub(super) group_end: GroupCall,
    /// `ncclSend` (its buffer is read only; NCCL declares it `const`).
    pub(super) send: PeerCall,
    pub(super) recv: PeerCall,
}

pub(super) fn unavailable(reason: impl Into<Arc<str>>) -> Error {
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
    pub(super) fn check(&self, code: sys::ncclResult_t, what: &str) -> Result<(), String> {
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
}

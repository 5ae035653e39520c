//! The CUDA device a backend drives: its state (context, buffers, streams, events and the caches
//! of the other modules), the steps every operation shares (binding the context, recording
//! events, timing operations) and its teardown. The other modules add the operations
//! (`launch.rs`, `copies/record.rs`, `graphs/run.rs`, `nccl/run.rs`, ...); `lib.rs` holds the
//! trait impls that call them.

use crate::compiler::{self, CompileStats};
use crate::copies::{PendingRead, Upload};
use crate::events::{EventTable, Timing};
use crate::loader::bind_context;
use crate::op_timing::OpTiming;
use crate::pinned::PinnedHome;
use crate::{flags, graphs, mapping, nccl};
use cudarc::driver::sys;
use gpuworld_hal::backend::{
    DeviceEvent, DeviceProperties, DeviceStream, HostBytes, OpKind, ReadTicket, Region, StorageId,
};
use gpuworld_hal::error::{DeviceError, Error};
use gpuworld_hal::ids::StreamId;
use rustc_hash::FxHashMap as HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// One runtime stream's CUDA stream and its first unreported fault.
pub(crate) struct CudaStream {
    pub(crate) id: StreamId,
    pub(crate) handle: sys::CUstream,
    pub(crate) fault: Option<Error>,
    /// Whether a read without an event is the last work queued (see `PendingRead`).
    pub(crate) read_is_last: bool,
    /// The value this stream's read flag was last set to write (`flags.rs`).
    pub(crate) flag_value: u32,
}

/// An NVIDIA GPU driven through the CUDA driver API.
pub struct CudaBackend {
    pub(crate) device: sys::CUdevice,
    pub(crate) context: sys::CUcontext,
    pub(crate) properties: DeviceProperties,
    pub(crate) arch: (i32, i32),
    pub(crate) multiprocessors: u32,
    pub(crate) buffers: HashMap<u64, (sys::CUdeviceptr, u64)>,
    pub(crate) next_storage: u64,
    pub(crate) allocated: u64,
    pub(crate) streams: Vec<CudaStream>,
    pub(crate) events: EventTable,
    /// Each operation's device time, while a trace or kernel statistics record them.
    pub(crate) op_timing: OpTiming,
    pub(crate) kernels: compiler::KernelCache,
    pub(crate) pinned: Arc<PinnedHome>,
    pub(crate) uploads: Vec<Upload>,
    pub(crate) reads: HashMap<ReadTicket, PendingRead>,
    pub(crate) finished_reads: HashMap<ReadTicket, HostBytes>,
    pub(crate) next_ticket: u64,
    pub(crate) poisoned: Option<Arc<str>>,
    /// The NCCL cliques this device ran collectives in (see `nccl::Clique`).
    pub(crate) cliques: Vec<nccl::KnownClique>,
    /// CUDA graphs made for captured gpuworld graphs (`graphs.rs`).
    pub(crate) graphs: graphs::GraphCache,
    /// The contexts of other devices this context was given direct access to (peer copies).
    pub(crate) peers_enabled: Vec<usize>,
    /// Address ranges reserved for the mapped pool, and their pages (`mapping.rs`).
    pub(crate) mapping: mapping::AddressRanges,
    /// The words the device sets when a read lands (`flags.rs`).
    pub(crate) read_flags: flags::ReadFlags,
    /// Turns of `collect_copies` since it last asked the driver about a flagged read.
    pub(crate) flag_turns: u32,
}

// SAFETY: the CUDA handles are owned by the backend and used only through `&mut self` (each call
// makes the context current on the calling thread first); `&self` methods read plain data.
unsafe impl Send for CudaBackend {}
// SAFETY: as above: no `&self` method touches a CUDA handle.
unsafe impl Sync for CudaBackend {}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.device)
            .field("name", &self.properties.name)
            .field("arch", &self.arch)
            .field("buffers", &self.buffers.len())
            .field("allocated", &self.allocated)
            .field("streams", &self.streams.len())
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// The device's compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.arch
    }

    /// The device's multiprocessor count.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// How kernels were served so far: NVRTC compiles, disk cache hits, memory cache hits.
    pub fn compile_stats(&self) -> CompileStats {
        self.kernels.stats()
    }

    /// Page-locked staging bytes held: free, in use by copies, or lent to callers.
    pub fn pinned_bytes(&self) -> usize {
        self.pinned.allocated_bytes()
    }

    /// How many CUDA graphs this device keeps for captured graphs' replays.
    pub fn graph_executables(&self) -> usize {
        self.graphs.len()
    }

    /// How many CUDA graphs were captured for replays, and how many graph versions (scalar
    /// updates) were applied to an executable in place instead.
    pub fn graph_captures_and_updates(&self) -> (u64, u64) {
        self.graphs.counts()
    }

    /// Device bytes allocated from the driver.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The device's free and total memory in bytes, as the driver reports them now
    /// (`cuMemGetInfo`): what other allocations in this process and in other processes leave.
    pub fn memory_info(&self) -> Result<(u64, u64), Error> {
        self.bind();
        let (mut free, mut total) = (0, 0);
        // SAFETY: two out-parameters, with the backend's context current.
        let code = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Device(DeviceError::BackendUnavailable {
                backend: "cuda",
                reason: format!("cuMemGetInfo failed: {code:?}").into(),
            }));
        }
        Ok((free as u64, total as u64))
    }

    /// The reason the context became unusable, once a sticky device error happened.
    pub fn poisoned(&self) -> Option<Arc<str>> {
        self.poisoned.clone()
    }

    /// The device pointer of `storage`, for interoperation with raw CUDA (benchmarks).
    pub fn device_pointer(&self, storage: StorageId) -> Option<u64> {
        self.buffers.get(&storage.0).map(|(ptr, _)| *ptr)
    }

    /// The raw CUDA stream behind a device stream, for interoperation with raw CUDA.
    pub fn raw_stream(&self, stream: DeviceStream) -> Option<*mut c_void> {
        self.streams
            .get(stream.0 as usize)
            .map(|s| s.handle.cast::<c_void>())
    }

    /// Makes the context current on the calling thread if it is not already (reading the current
    /// context is cheaper than setting it, which matters for launch throughput).
    pub(crate) fn bind(&self) {
        bind_context(self.context);
    }

    pub(crate) fn region_pointer(&self, region: Region) -> Option<sys::CUdeviceptr> {
        let (base, size) = self.buffers.get(&region.storage.0)?;
        (region.offset.checked_add(region.size)? <= *size).then_some(base + region.offset)
    }

    /// Records an internal event (no timestamp) on stream `s`; `None` after recording the
    /// failure.
    pub(crate) fn record_internal(&mut self, s: usize) -> Option<sys::CUevent> {
        self.record(s, Timing::Untimed)
    }

    /// Records an event of `timing` on stream `s`; `None` after recording the failure.
    pub(crate) fn record(&mut self, s: usize, timing: Timing) -> Option<sys::CUevent> {
        let event = match self.events.take_cuda_event(timing) {
            Ok(event) => event,
            Err(code) => {
                self.failed(s, "cuEventCreate", code);
                return None;
            }
        };
        let stream = self.work_stream(s);
        // SAFETY: `event` and the stream belong to the current context.
        let code = unsafe { sys::cuEventRecord(event, stream) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.events.recycle(event, timing);
            self.failed(s, "cuEventRecord", code);
            return None;
        }
        Some(event)
    }
}

impl CudaBackend {
    /// A timed event on `stream` before an operation, while operations are timed.
    pub(crate) fn stamp(&mut self, stream: DeviceStream) -> Option<sys::CUevent> {
        if !self.op_timing.is_recording() || self.poisoned.is_some() {
            return None;
        }
        let handle = self.streams.get(stream.0 as usize)?.handle;
        self.bind();
        self.op_timing.stamp(handle)
    }

    /// Ends the timing of an operation that began at `start`.
    pub(crate) fn timed(
        &mut self,
        stream: DeviceStream,
        start: Option<sys::CUevent>,
        kind: OpKind,
        bytes: u64,
    ) {
        let Some(start) = start else {
            return;
        };
        let handle = self.streams[stream.0 as usize].handle;
        if let Some(end) = self.op_timing.stamp(handle) {
            self.op_timing.finish(stream, kind, bytes, start, end);
        }
    }

    /// Completes the events and copies that have passed (recording failures as faults); whether
    /// any had.
    pub(crate) fn notice_completions(&mut self) -> bool {
        let (events_passed, failure) = self.events.sweep();
        if let Some(code) = failure {
            self.failed(usize::MAX, "an event failed", code);
        }
        self.collect_copies() || events_passed
    }

    /// Records a runtime event of `timing` on `stream` (`flush` and `mark`).
    pub(crate) fn record_numbered(&mut self, stream: DeviceStream, timing: Timing) -> DeviceEvent {
        let s = stream.0 as usize;
        if self.refuse(s) {
            return self.events.completed_number();
        }
        self.bind();
        match self.record(s, timing) {
            Some(event) => self.events.insert(s, event, timing),
            None => self.events.completed_number(),
        }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        self.bind();
        // SAFETY: waits for every copy and launch of this context before their memory goes.
        unsafe {
            sys::cuCtxSynchronize();
        }
        self.retire_all_copies();
        self.read_flags.free();
        self.pinned.clear();
        // Pinned memory lent to callers lives in this context: never reset it under them.
        let lent_out = Arc::strong_count(&self.pinned) > 1;
        self.events.destroy_all();
        self.op_timing.destroy_all();
        self.graphs.clear();
        self.kernels.unload();
        self.release_address_ranges();
        for (_, (pointer, _)) in self.buffers.drain() {
            // SAFETY: the context is idle, so no work uses the buffer.
            unsafe {
                sys::cuMemFree_v2(pointer);
            }
        }
        for stream in self.streams.drain(..) {
            if !stream.handle.is_null() {
                // SAFETY: the stream is idle and never used again.
                unsafe {
                    sys::cuStreamDestroy_v2(stream.handle);
                }
            }
        }
        // SAFETY: a poisoned primary context is dead for every user of the process already;
        // resetting it is the documented way to let a later retain start afresh where the driver
        // allows it. Then the retain made in `new` is released.
        unsafe {
            if self.poisoned.is_some() && !lent_out {
                sys::cuDevicePrimaryCtxReset_v2(self.device);
            }
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

#![doc = include_str!("../README.md")]

mod compiler;
mod copies;
mod cuda_c;
mod events;
mod faults;
mod flags;
mod graphs;
mod launch;
mod library;
mod loader;
mod mapping;
mod nccl;
mod op_timing;
mod open;
mod peer;
mod pinned;
mod watch;

pub use compiler::{CompileStats, default_cache_dir};
pub use cuda_c::{CudaSource, PRELUDE, cuda_text};
pub use cudarc;
/// NCCL's library and communicators, for the workspace's collective benches: no stability
/// promise (the runtime's collectives reach them through `Backend::device_collectives`).
#[doc(hidden)]
pub use nccl::{NcclComm, communicators, grouped, nccl, process_communicator};
pub use open::{availability, device_count};

// The crate's own: the backend builds its collectives and peer copies from them.
pub(crate) use nccl::NcclGroup;
pub(crate) use peer::{Drive, PeerArrival, PeerCopy, PeerDestination, PeerLink};

use copies::{PendingRead, Upload};
use cudarc::driver::sys;
use events::{EventState, EventTable, Timing};
use gpuworld_hal::backend::*;
use gpuworld_hal::backend::{OpClock, OpKind, OpTime};
use gpuworld_hal::cross_device::{DeviceCollectives, PeerTransfer, ProcessCollectives};
use gpuworld_hal::error::{DeviceError, Error};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{ExecutionMode, Kernel, KernelDef};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use gpuworld_hal::open::{SchedulingDefaults, SchedulingStrategy};
use op_timing::OpTiming;
use pinned::PinnedHome;
use rustc_hash::FxHashMap as HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blocks per multiprocessor of a launch whose cube count is read on the device.
const DYNAMIC_BLOCKS_PER_SM: u32 = 8;

/// How to open a CUDA device.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CudaConfig {
    /// The device's ordinal.
    pub device: usize,
    /// Where compiled kernels are cached on disk; `None` keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Free pinned staging bytes kept for reuse; more is returned to the driver.
    pub max_free_staging: usize,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl CudaConfig {
    /// This configuration with [`device`](Self::device) set to `device`.
    #[must_use]
    pub fn with_device(mut self, device: usize) -> Self {
        self.device = device;
        self
    }

    /// This configuration with [`cache_dir`](Self::cache_dir) set to `cache_dir`.
    #[must_use]
    pub fn with_cache_dir(mut self, cache_dir: Option<PathBuf>) -> Self {
        self.cache_dir = cache_dir;
        self
    }

    /// This configuration with [`max_free_staging`](Self::max_free_staging) set to
    /// `max_free_staging`.
    #[must_use]
    pub fn with_max_free_staging(mut self, max_free_staging: usize) -> Self {
        self.max_free_staging = max_free_staging;
        self
    }
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            device: 0,
            cache_dir: default_cache_dir(),
            max_free_staging: 1 << 30,
        }
    }
}

/// One runtime stream's CUDA stream and its first unreported fault.
struct CudaStream {
    id: StreamId,
    handle: sys::CUstream,
    fault: Option<Error>,
    /// Whether a read without an event is the last work queued (see `PendingRead`).
    read_is_last: bool,
    /// The value this stream's read flag was last set to write (`flags.rs`).
    flag_value: u32,
}

/// Makes `context` current on the calling thread, where it is not already.
fn bind_context(context: sys::CUcontext) {
    let mut current = std::ptr::null_mut();
    // SAFETY: `context` is a primary context its backend retained and keeps until `Drop`;
    // `current` is a valid out-pointer.
    unsafe {
        if sys::cuCtxGetCurrent(&mut current) != sys::CUresult::CUDA_SUCCESS || current != context {
            sys::cuCtxSetCurrent(context);
        }
    }
}

/// An NVIDIA GPU driven through the CUDA driver API.
pub struct CudaBackend {
    device: sys::CUdevice,
    context: sys::CUcontext,
    properties: DeviceProperties,
    arch: (i32, i32),
    multiprocessors: u32,
    buffers: HashMap<u64, (sys::CUdeviceptr, u64)>,
    next_storage: u64,
    allocated: u64,
    streams: Vec<CudaStream>,
    events: EventTable,
    /// Each operation's device time, while a trace or kernel statistics record them.
    op_timing: OpTiming,
    kernels: compiler::KernelCache,
    pinned: Arc<PinnedHome>,
    uploads: Vec<Upload>,
    reads: HashMap<ReadTicket, PendingRead>,
    finished_reads: HashMap<ReadTicket, HostBytes>,
    next_ticket: u64,
    poisoned: Option<Arc<str>>,
    /// The NCCL cliques this device ran collectives in (see `nccl::Clique`).
    cliques: Vec<nccl::KnownClique>,
    /// CUDA graphs made for captured gpuworld graphs (`graphs.rs`).
    graphs: graphs::GraphCache,
    /// The contexts of other devices this context was given direct access to (peer copies).
    peers_enabled: Vec<usize>,
    /// Address ranges reserved for the mapped pool, and their pages (`mapping.rs`).
    mapping: mapping::AddressRanges,
    /// The words the device sets when a read lands (`flags.rs`).
    read_flags: flags::ReadFlags,
    /// Turns of `collect_copies` since it last asked the driver about a flagged read.
    flag_turns: u32,
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
    fn bind(&self) {
        bind_context(self.context);
    }

    fn region_pointer(&self, region: Region) -> Option<sys::CUdeviceptr> {
        let (base, size) = self.buffers.get(&region.storage.0)?;
        (region.offset.checked_add(region.size)? <= *size).then_some(base + region.offset)
    }

    /// Records an internal event (no timestamp) on stream `s`; `None` after recording the
    /// failure.
    fn record_internal(&mut self, s: usize) -> Option<sys::CUevent> {
        self.record(s, Timing::Untimed)
    }

    /// Records an event of `timing` on stream `s`; `None` after recording the failure.
    fn record(&mut self, s: usize, timing: Timing) -> Option<sys::CUevent> {
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
    fn stamp(&mut self, stream: DeviceStream) -> Option<sys::CUevent> {
        if !self.op_timing.is_recording() || self.poisoned.is_some() {
            return None;
        }
        let handle = self.streams.get(stream.0 as usize)?.handle;
        self.bind();
        self.op_timing.stamp(handle)
    }

    /// Ends the timing of an operation that began at `start`.
    fn timed(
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
    fn notice_completions(&mut self) -> bool {
        let (events_passed, failure) = self.events.sweep();
        if let Some(code) = failure {
            self.failed(usize::MAX, "an event failed", code);
        }
        self.collect_copies() || events_passed
    }

    /// Records a runtime event of `timing` on `stream` (`flush` and `mark`).
    fn record_numbered(&mut self, stream: DeviceStream, timing: Timing) -> DeviceEvent {
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

/// Tasks a cuda stream queues before they are submitted, when nothing forces them earlier.
pub const MAX_TASKS: usize = 1;

impl OpenBackend for CudaBackend {
    type Config = CudaConfig;

    fn device_config(index: u32) -> CudaConfig {
        CudaConfig {
            device: index as usize,
            ..CudaConfig::default()
        }
    }

    fn open(config: CudaConfig, _settings: &BackendSettings) -> Result<CudaBackend, Error> {
        CudaBackend::new(config)
    }

    /// Each ordinal the driver sees, opened to read its properties; none without a driver.
    fn enumerate() -> Vec<DeviceInfo> {
        (0..device_count().unwrap_or(0))
            .map(|ordinal| {
                let backend = CudaBackend::new(Self::device_config(ordinal as u32));
                let detail = backend.as_ref().map_or(String::new(), |b| {
                    let (major, minor) = b.compute_capability();
                    format!(
                        "compute capability {major}.{minor}, {} multiprocessors",
                        b.multiprocessors()
                    )
                });
                DeviceInfo {
                    id: DeviceId {
                        backend: Self::NAME,
                        index: ordinal as u32,
                    },
                    properties: backend.map(|b| b.properties()),
                    detail,
                }
            })
            .collect()
    }

    /// Up to [`MAX_TASKS`] tasks batched per stream, streams interleaved.
    fn scheduling() -> SchedulingDefaults {
        SchedulingDefaults::default()
            .with_max_tasks(MAX_TASKS)
            .with_strategy(SchedulingStrategy::Interleave)
    }
}

impl NativeResource for CudaBackend {
    /// The device pointer of the region's first byte.
    type Resource<'a> = u64;

    fn resource(&self, region: Region) -> Option<u64> {
        Some(self.device_pointer(region.storage)? + region.offset)
    }
}

impl Backend for CudaBackend {
    /// `cuMemcpyPeerAsync` on the source's stream, the destination's stream waiting on its
    /// event (`peer.rs`).
    fn peer_transfer(source: Drive, destination: Drive) -> Option<PeerTransfer> {
        let link = PeerLink::new();
        Some(PeerTransfer {
            destination: Box::new(PeerDestination(link.clone())),
            copy: Box::new(PeerCopy {
                link: link.clone(),
                drive: destination,
            }),
            arrival: Box::new(PeerArrival {
                link,
                drive: source,
            }),
        })
    }

    /// NCCL communicators over the group's devices (`nccl.rs`).
    fn device_collectives(devices: &[u32]) -> Option<Result<Arc<dyn DeviceCollectives>, Error>> {
        Some(communicators(devices).map(|comms| Arc::new(NcclGroup(comms)) as _))
    }

    /// CUDA graphs (`graphs.rs`).
    fn replays_graphs() -> bool {
        true
    }

    /// Lanes of a CUDA graph, one per stream, ordered by events (`graphs.rs`).
    fn replays_graphs_across_streams() -> bool {
        true
    }

    /// A replay of launches as one CUDA graph (`graphs.rs`).
    fn graph_replay(
        graph: u64,
        version: u64,
        launches: std::sync::Arc<[gpuworld_hal::graph::PlannedLaunch]>,
    ) -> Option<NativeWork> {
        Some(graphs::GraphReplay::work(graph, version, launches))
    }

    /// NCCL communicators spanning processes (`nccl.rs`).
    fn process_collectives() -> Option<Result<&'static dyn ProcessCollectives, Error>> {
        let ready = nccl::nccl().and_then(|_| {
            loader::driver().map_err(|reason| {
                Error::Device(DeviceError::BackendUnavailable {
                    backend: "cuda",
                    reason,
                })
            })
        });
        Some(ready.map(|_| &nccl::NcclProcesses as &dyn ProcessCollectives))
    }

    const NAME: &'static str = "cuda";
    type Source = CudaSource;

    fn library_source(kernel: &KernelDef) -> Option<&'static CudaSource> {
        gpuworld_hal::library::source_in(&library::LIBRARY, kernel)
    }

    fn generated_text(kernel: &KernelDef) -> Option<String> {
        cuda_c::cuda_text(kernel).map(|text| format!("{}\n{text}", cuda_c::PRELUDE))
    }

    fn warm_up(&mut self, kernel: Kernel, mode: ExecutionMode) -> Result<(), Error> {
        if let Some(message) = &self.poisoned {
            return Err(Error::device_fault(StreamId::GC, message.to_string()));
        }
        self.bind();
        self.kernels.function(kernel, mode, false).map(|_| ())
    }

    fn properties(&self) -> DeviceProperties {
        self.properties.clone()
    }

    fn device_index(&self) -> u32 {
        // `cuDeviceGet` hands back the ordinal as the device handle.
        u32::try_from(self.device).unwrap_or(0)
    }

    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.bind();
        if let Some(reason) = &self.poisoned {
            return Err(AllocError::DeviceFailed {
                reason: reason.clone(),
            });
        }
        let bytes = usize::try_from(size.max(1)).map_err(|_| AllocError::OutOfMemory)?;
        let mut pointer = 0;
        // SAFETY: allocates device memory in the current context, freed in `deallocate`/`Drop`.
        let code = unsafe { sys::cuMemAlloc_v2(&mut pointer, bytes) };
        if code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            tracing::warn!(target: "gpuworld::memory", size, "cuMemAlloc: out of memory");
            return Err(AllocError::OutOfMemory);
        }
        if code != sys::CUresult::CUDA_SUCCESS {
            // Not a lack of memory: a failed context (which poisons the backend) or a refusal.
            self.failed(usize::MAX, "cuMemAlloc", code);
            let reason = self.poisoned.clone().unwrap_or_else(|| {
                format!("cuMemAlloc: {}", loader::describe(faults::sys_error(code))).into()
            });
            return Err(AllocError::DeviceFailed { reason });
        }
        let id = self.next_storage;
        self.next_storage += 1;
        self.buffers.insert(id, (pointer, size));
        self.allocated += size;
        Ok(StorageId(id))
    }

    fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.reserve_address_range(size)
    }

    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError> {
        self.map_range_pages(storage, offset, len)
    }

    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        self.unmap_range_pages(storage, offset, len);
    }

    unsafe fn free_addresses(&mut self, storage: StorageId) {
        self.free_address_range(storage);
    }

    fn trim_pages(&mut self) {
        self.trim_spares();
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        self.bind();
        if let Some((pointer, size)) = self.buffers.remove(&storage.0) {
            self.allocated -= size;
            // SAFETY: the runtime guarantees no work uses the buffer any more.
            unsafe {
                sys::cuMemFree_v2(pointer);
            }
        }
    }

    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        self.bind();
        let index = self.streams.len();
        let mut handle = std::ptr::null_mut();
        // SAFETY: creates a stream in the current context, destroyed in `Drop`.
        let code = unsafe {
            sys::cuStreamCreate(
                &mut handle,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            )
        };
        self.streams.push(CudaStream {
            id,
            handle: std::ptr::null_mut(),
            fault: None,
            read_is_last: false,
            flag_value: 0,
        });
        if code == sys::CUresult::CUDA_SUCCESS {
            self.streams[index].handle = handle;
        } else {
            self.failed(index, "cuStreamCreate", code);
        }
        DeviceStream(index as u32)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        let start = self.stamp(stream);
        self.upload(stream.0 as usize, dst, data);
        self.timed(stream, start, OpKind::Write, dst.size);
    }

    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        let start = self.stamp(stream);
        self.device_copy(stream.0 as usize, src, dst);
        self.timed(stream, start, OpKind::Copy, src.size);
    }

    unsafe fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) {
        let s = stream.0 as usize;
        if self.refuse(s) {
            return;
        }
        self.bind();
        let start = self.stamp(stream);
        if let Err(error) = self.launch_on(s, kernel, count, buffers, scalars, mode) {
            tracing::warn!(target: "gpuworld::kernel", kernel = kernel.id, %error, "launch refused");
            self.fault_with(s, error);
        }
        let bytes = buffers.iter().map(|r| r.size).sum();
        self.timed(stream, start, OpKind::Launch(kernel), bytes);
    }

    fn run_native(
        &mut self,
        stream: DeviceStream,
        buffers: &[Region],
        work: NativeWork,
    ) -> Result<(), Error> {
        let s = stream.0 as usize;
        if self.refuse(s) {
            // The other ranks of a collective this device cannot run would wait for it forever.
            if let (Some(call), Some(reason)) = (nccl::as_nccl_call(&work), self.poisoned.clone()) {
                self.note_collective(s, &call.comm.clique);
                self.abort_cliques(&reason);
            }
            return Ok(());
        }
        self.bind();
        if let Some(result) = self.run_peer(s, buffers, &work) {
            return result;
        }
        if let Some(replay) = graphs::as_graph_replay(&work) {
            return self.run_graph(s, buffers, replay);
        }
        let Some(call) = nccl::as_nccl_call(&work) else {
            return Err(Error::Device(DeviceError::BackendUnavailable {
                backend: "cuda",
                reason: format!("it runs no native work `{}`", work.name()).into(),
            }));
        };
        self.run_nccl(s, buffers, call)
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        let start = self.stamp(stream);
        let ticket = self.readback(stream.0 as usize, src);
        self.timed(stream, start, OpKind::Read, src.size);
        ticket
    }

    fn record_op_times(&mut self, on: bool) -> Option<OpClock> {
        self.op_timing.set_recording(on);
        Some(OpClock::Device)
    }

    fn take_op_times(&mut self, into: &mut Vec<OpTime>) {
        if self.poisoned.is_none() {
            self.bind();
            self.op_timing.take(into);
        }
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.record_numbered(stream, Timing::Untimed)
    }

    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.record_numbered(stream, Timing::Timed)
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        let s = stream.0 as usize;
        if self.refuse(s) {
            return;
        }
        let Some(cuda_event) = self.events.live(event) else {
            return;
        };
        self.bind();
        let handle = self.work_stream(s);
        // SAFETY: the stream and the event belong to the current context.
        let code = unsafe { sys::cuStreamWaitEvent(handle, cuda_event, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.failed(s, "cuStreamWaitEvent", code);
        }
    }

    fn poll(&mut self, _tick: u64) {
        if self.poisoned.is_some() {
            return;
        }
        self.bind();
        self.notice_completions();
    }

    fn wait_for_progress(
        &mut self,
        timeout: Duration,
        interrupt: Option<&dyn Fn() -> bool>,
    ) -> bool {
        if self.poisoned.is_some()
            || (self.uploads.is_empty() && self.reads.is_empty() && !self.events.any_live())
        {
            return false;
        }
        self.bind();
        self.flag_waited_reads();
        let start = Instant::now();
        loop {
            // Noticing is polling: what completes here is taken as it is found, so the tick
            // that waited does not query the driver for it again.
            if self.notice_completions() {
                return true;
            }
            if interrupt.is_some_and(|interrupted| interrupted())
                || !watch::pause(start.elapsed(), timeout)
            {
                return true;
            }
        }
    }

    fn progress_watch(&mut self) -> Option<Box<dyn ProgressWatch>> {
        if self.poisoned.is_some() {
            return None;
        }
        Some(Box::new(self.watch()?))
    }

    fn event_label(&self, event: DeviceEvent) -> String {
        format!("cuda event {}", event.0)
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        let Some(cuda_event) = self.events.live(event) else {
            return true;
        };
        self.bind();
        match events::query(cuda_event) {
            EventState::Pending => false,
            EventState::Done => {
                self.events.complete(event);
                true
            }
            EventState::Failed(code) => {
                self.failed(usize::MAX, "an event failed", code);
                self.events.complete(event);
                true
            }
        }
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.finished_reads.remove(&ticket)
    }

    fn staging(&self) -> Arc<dyn StagingAllocator> {
        Arc::new(pinned::PinnedStaging(Arc::downgrade(&self.pinned)))
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        // Asked again as a read or sync is answered, after the wait for its work: a collective
        // another rank's abort ended during that wait is reported with it.
        self.notice_aborted_cliques();
        self.streams.get_mut(stream.0 as usize)?.fault.take()
    }

    fn device_elapsed(&mut self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        let (a, b) = (self.events.timed(start)?, self.events.timed(end)?);
        self.bind();
        let mut ms = 0f32;
        // SAFETY: both events belong to the current context and were recorded.
        let code = unsafe { sys::cuEventElapsedTime_v2(&mut ms, a, b) };
        (code == sys::CUresult::CUDA_SUCCESS && ms >= 0.0)
            .then(|| Duration::from_secs_f64(f64::from(ms) / 1000.0))
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

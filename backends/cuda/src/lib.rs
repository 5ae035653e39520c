#![doc = include_str!("../README.md")]

mod compiler;
mod config;
mod copies;
mod cuda_c;
mod device;
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
pub use config::CudaConfig;
pub use cuda_c::{CudaSource, PRELUDE, cuda_text};
pub use cudarc;
pub use device::CudaBackend;
/// NCCL's library and communicators, for the workspace's collective benches: no stability
/// promise (the runtime's collectives reach them through `CrossDevice::device_collectives`).
#[doc(hidden)]
pub use nccl::{NcclComm, communicators, grouped, nccl, process_communicator};
pub use open::{availability, device_count};

// The crate's own: the backend builds its collectives and peer copies from them.
pub(crate) use nccl::NcclGroup;
pub(crate) use peer::{Drive, PeerArrival, PeerCopy, PeerDestination, PeerLink};

use cudarc::driver::sys;
use device::CudaStream;
use events::{EventState, Timing};
use gpuworld_hal::backend::*;
use gpuworld_hal::backend::{OpClock, OpKind, OpTime};
use gpuworld_hal::cross_device::{DeviceCollectives, PeerTransfer, ProcessCollectives};
use gpuworld_hal::error::{DeviceError, Error};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{ExecutionMode, Kernel, KernelDef};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use gpuworld_hal::open::{SchedulingDefaults, SchedulingStrategy};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

impl Kernels for CudaBackend {
    const NAME: &'static str = "cuda";
    type Source = CudaSource;

    fn library_source(kernel: &KernelDef) -> Option<&'static CudaSource> {
        library::source(kernel)
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
}

impl Memory for CudaBackend {
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
                format!("cuMemAlloc: {}", loader::describe(loader::sys_error(code))).into()
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

    fn staging(&self) -> Arc<dyn StagingAllocator> {
        Arc::new(pinned::PinnedStaging(Arc::downgrade(&self.pinned)))
    }
}

impl Queue for CudaBackend {
    /// A replay of launches as one CUDA graph (`graphs.rs`).
    fn graph_replay(
        graph: u64,
        version: u64,
        launches: std::sync::Arc<[gpuworld_hal::graph::PlannedLaunch]>,
    ) -> Option<NativeWork> {
        Some(graphs::GraphReplay::work(graph, version, launches))
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
}

impl Completion for CudaBackend {
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

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        // Asked again as a read or sync is answered, after the wait for its work: a collective
        // another rank's abort ended during that wait is reported with it.
        self.notice_aborted_cliques();
        self.streams.get_mut(stream.0 as usize)?.fault.take()
    }
}

impl DeviceTiming for CudaBackend {
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

impl CrossDevice for CudaBackend {
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
    fn device_collectives(devices: &[u32]) -> Result<Arc<dyn DeviceCollectives>, Error> {
        communicators(devices).map(|comms| Arc::new(NcclGroup(comms)) as _)
    }

    /// NCCL communicators spanning processes (`nccl.rs`).
    fn process_collectives() -> Result<&'static dyn ProcessCollectives, Error> {
        let ready = nccl::nccl().and_then(|_| {
            loader::driver().map_err(|reason| {
                Error::Device(DeviceError::BackendUnavailable {
                    backend: "cuda",
                    reason,
                })
            })
        });
        ready.map(|_| &nccl::NcclProcesses as &dyn ProcessCollectives)
    }
}

impl Backend for CudaBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // CUDA graphs, with a lane per stream ordered by events (`graphs.rs`).
            graph_replay: true,
            graph_replay_across_streams: true,
            progress_watch: true,
            device_clock: false,
            // `cuMemcpyPeerAsync` (`peer.rs`) and NCCL (`nccl.rs`).
            peer_transfer: true,
            device_collectives: true,
            process_collectives: true,
        }
    }

    fn properties(&self) -> DeviceProperties {
        self.properties.clone()
    }

    fn device_index(&self) -> u32 {
        // `cuDeviceGet` hands back the ordinal as the device handle.
        u32::try_from(self.device).unwrap_or(0)
    }
}

#![doc = include_str!("../README.md")]

mod adapter;
mod bind_groups;
mod copies;
mod faults;
mod launch;
mod library;
mod marks;
mod pipelines;
mod readback;
mod replay;
mod shared_device;
mod stream;
mod timing;
mod uniforms;
mod uploads;
mod wgsl;
mod writes;

pub use adapter::{AdapterSelection, AdapterSummary, WgpuConfig, list_adapters};
pub use shared_device::{LimitShortfall, SharedDeviceError, required_limits};
pub use timing::KernelTiming;
pub use wgpu;
pub use wgsl::{WgslSource, wgsl_text};

use bind_groups::BindGroupCache;
use faults::{DeviceErrors, describe};
use gpuworld_hal::backend::*;
use gpuworld_hal::backend::{OpClock, OpTime};
use gpuworld_hal::error::Error;
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{ExecutionMode, Kernel, KernelDef};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use gpuworld_hal::open::{SchedulingDefaults, SchedulingStrategy};
use marks::Marks;
use pipelines::PipelineCache;
use readback::Readbacks;
use replay::PlanCache;
use slotmap::{DefaultKey, Key, KeyData, SlotMap};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use stream::WgpuStream;
use timing::Timing;
use uniforms::UniformPool;
use uploads::UploadBelt;

/// Commands after which the poll submits a batch even while the device is busy.
pub(crate) const AUTO_SUBMIT_COMMANDS: u32 = 512;

/// Held while a wgpu device is opened and while a runtime over one is torn down: NVIDIA's
/// Vulkan driver (580) deadlocks when devices are created and destroyed on several threads at
/// once (seen as `vkCreateDevice` and `vkDestroyDevice` blocked on each other's locks).
static DEVICE_LIFECYCLE: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Runs `f` holding the lock gpuworld holds while it opens a wgpu device and while a runtime over
/// one is torn down: a renderer that creates or drops wgpu devices of its own on several threads
/// (tests, tools) wraps those calls in it, since NVIDIA's Vulkan driver (580) deadlocks when
/// `vkCreateDevice` and `vkDestroyDevice` run at once on different threads.
pub fn with_device_lifecycle<R>(f: impl FnOnce() -> R) -> R {
    let _guard = DEVICE_LIFECYCLE.lock();
    f()
}

/// Tasks a wgpu stream queues before they are recorded, when nothing forces them earlier.
pub const MAX_TASKS: usize = 16;

impl OpenBackend for WgpuBackend {
    type Config = WgpuConfig;

    fn device_config(index: u32) -> WgpuConfig {
        WgpuConfig {
            adapter: AdapterSelection::Index(index as usize),
            ..WgpuConfig::default()
        }
    }

    fn open(config: WgpuConfig, _settings: &BackendSettings) -> Result<WgpuBackend, Error> {
        WgpuBackend::new(config)
    }

    /// Each adapter of the default graphics APIs, opened to read its properties.
    fn enumerate() -> Vec<DeviceInfo> {
        list_adapters(WgpuConfig::default().backends)
            .into_iter()
            .map(|adapter| DeviceInfo {
                id: DeviceId {
                    backend: Self::NAME,
                    index: adapter.index as u32,
                },
                properties: WgpuBackend::new(Self::device_config(adapter.index as u32))
                    .map(|b| b.properties()),
                detail: format!(
                    "{:?} on {:?}, {}",
                    adapter.device_type, adapter.backend, adapter.driver
                ),
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

impl NativeResource for WgpuBackend {
    /// The buffer holding the region, which starts at the region's offset in it.
    type Resource<'a> = &'a wgpu::Buffer;

    fn resource(&self, region: Region) -> Option<&wgpu::Buffer> {
        self.buffer(region.storage)
    }
}

/// A device driven through wgpu.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter_info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    config: WgpuConfig,
    errors: DeviceErrors,
    lost_reported: bool,
    buffers: SlotMap<DefaultKey, wgpu::Buffer>,
    allocated: u64,
    streams: Vec<WgpuStream>,
    pipelines: PipelineCache,
    bind_groups: BindGroupCache,
    /// Recorded plans of captured graphs (`replay.rs`).
    plans: PlanCache,
    uniforms: UniformPool,
    uploads: UploadBelt,
    readbacks: Readbacks,
    timing: Option<Timing>,
    marks: Option<Marks>,
    submitted: u64,
    completed: Arc<AtomicU64>,
    /// The adapter's index in [`list_adapters`]' order.
    adapter_index: u32,
    /// Bytes that crossed between host and device so far.
    host_traffic: HostTraffic,
    /// Held by whoever polls the device, so that gpuworld's polls never run at once (see
    /// [`DevicePolls`]).
    polls: DevicePolls,
}

/// One poll of the device at a time among the backend's own: wgpu-core 30.0.x panics on the
/// thread of a `Wait` poll that timed out when another thread's poll retired the queue meanwhile
/// ("If the queue is empty, the current submission index (N) should be at least the wait
/// submission index (M)", `Device::maintain`; fixed upstream by gfx-rs/wgpu#9958, not in a 30.x
/// release). The device thread's wait (with a timeout) and a caller's tick polled at once: the
/// fuzzer's 20-seed wgpu run hit it. A wait and a submit (wgpu-core polls after each) take the
/// lock; a tick's non-blocking poll skips while a wait holds it (the wait's own poll runs the
/// same callbacks). Polls and submits of the same device by a renderer sharing it, or by another
/// runtime on it, are not covered (`docs/render.md`).
#[derive(Clone, Debug, Default)]
struct DevicePolls(Arc<parking_lot::Mutex<()>>);

/// Bytes that crossed between the host and the device through the backend: what a renderer
/// sharing the device saves by drawing from leases instead of reading and uploading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostTraffic {
    /// Bytes written from the host: writes and creations, and the scalars of launches.
    pub uploaded: u64,
    /// Bytes read back to the host (timestamp queries of marks and dispatch timing are not
    /// counted: turn them off to see zero).
    pub read_back: u64,
}

impl HostTraffic {
    /// Both directions together.
    pub fn total(&self) -> u64 {
        self.uploaded + self.read_back
    }
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.adapter_info.name)
            .field("backend", &self.adapter_info.backend)
            .field("adapter_index", &self.adapter_index)
            .field("buffers", &self.buffers.len())
            .field("allocated", &self.allocated)
            .field("streams", &self.streams.len())
            .field("submitted", &self.submitted)
            .finish_non_exhaustive()
    }
}

impl WgpuBackend {
    /// Opens the adapter `config` selects; `DeviceError::BackendUnavailable` when there is none.
    pub fn new(config: WgpuConfig) -> Result<WgpuBackend, Error> {
        let _guard = DEVICE_LIFECYCLE.lock();
        let instance = adapter::instance(config.backends);
        let adapter = adapter::select_adapter(&instance, &config)?;
        let (device, queue) = adapter::open_device(&adapter, &config)?;
        let adapter_index = adapter::index_of(&instance, config.backends, &adapter.get_info());
        Ok(WgpuBackend::over(
            &adapter,
            device,
            queue,
            config,
            adapter_index,
        ))
    }

    /// A backend on a device the caller opened (a renderer's): gpuworld's work is submitted on
    /// `queue`, so it runs before the caller's submissions made after it and after those made
    /// before it (one queue runs submissions in order). `SharedDeviceError` names what the
    /// device lacks. Only dispatch timing and marks use a feature (`TIMESTAMP_QUERY`), where
    /// the device has it. `config.adapter`, `backends` are not read.
    pub fn on_device(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        config: WgpuConfig,
    ) -> Result<WgpuBackend, SharedDeviceError> {
        shared_device::check(adapter, &device)?;
        let _guard = DEVICE_LIFECYCLE.lock();
        let instance = adapter::instance(config.backends);
        let adapter_index = adapter::index_of(&instance, config.backends, &adapter.get_info());
        Ok(WgpuBackend::over(
            adapter,
            device,
            queue,
            config,
            adapter_index,
        ))
    }

    fn over(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        config: WgpuConfig,
        adapter_index: u32,
    ) -> WgpuBackend {
        let errors = DeviceErrors::install(&device);
        let limits = device.limits();
        let timing = if config.timestamps {
            Timing::new(&device, &queue)
        } else {
            None
        };
        let marks = if config.mark_timestamps {
            Marks::new(&device, &queue)
        } else {
            None
        };
        let adapter_info = adapter.get_info();
        tracing::info!(
            target: "gpuworld::stream",
            adapter = %adapter_info.name,
            backend = ?adapter_info.backend,
            device_type = ?adapter_info.device_type,
            "wgpu device opened"
        );
        WgpuBackend {
            uniforms: UniformPool::new(u64::from(limits.min_uniform_buffer_offset_alignment)),
            uploads: UploadBelt::new(config.upload_chunk, config.upload_budget),
            device,
            queue,
            adapter_info,
            limits,
            config,
            errors,
            lost_reported: false,
            buffers: SlotMap::new(),
            allocated: 0,
            streams: Vec::new(),
            pipelines: PipelineCache::default(),
            bind_groups: BindGroupCache::default(),
            plans: PlanCache::default(),
            readbacks: Readbacks::default(),
            timing,
            marks,
            submitted: 0,
            completed: Arc::new(AtomicU64::new(0)),
            adapter_index,
            host_traffic: HostTraffic::default(),
            polls: DevicePolls::default(),
        }
    }

    /// The adapter's name, API, type and driver.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.adapter_info
    }

    /// The device's limits (the adapter's best, requested in full).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The features enabled on the device.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }

    /// The wgpu device, for interoperation and tests.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue, for interoperation.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Compute pipelines compiled so far; a cached kernel compiles once.
    pub fn pipelines_compiled(&self) -> u64 {
        self.pipelines.compiled()
    }

    /// Recorded plans made for captured graphs so far; a replay that finds its plan makes none.
    pub fn replay_plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Submissions made so far.
    pub fn submissions(&self) -> u64 {
        self.submitted
    }

    /// Bytes that crossed between host and device so far ([`HostTraffic`]).
    pub fn host_traffic(&self) -> HostTraffic {
        self.host_traffic
    }

    /// Bytes of upload staging held, at most the configured budget.
    pub fn upload_staging_bytes(&self) -> u64 {
        self.uploads.held()
    }

    /// Device time per kernel id, when timestamps were asked for and the adapter has them.
    pub fn kernel_timings(&self) -> Option<&BTreeMap<&'static str, KernelTiming>> {
        self.timing.as_ref().map(Timing::totals)
    }

    fn storage_key(storage: StorageId) -> DefaultKey {
        KeyData::from_ffi(storage.0).into()
    }

    fn buffer(&self, storage: StorageId) -> Option<&wgpu::Buffer> {
        self.buffers.get(Self::storage_key(storage))
    }

    fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Submits the batches that are due: those holding a read (someone waits for it), every
    /// batch when the device is idle, and batches grown past `AUTO_SUBMIT_COMMANDS`.
    fn submit_due_batches(&mut self) {
        let idle = self.completed() >= self.submitted;
        for s in 0..self.streams.len() {
            let stream = &self.streams[s];
            let due = stream.reads > 0 || idle || stream.commands >= AUTO_SUBMIT_COMMANDS;
            if stream.has_batch() && due {
                self.submit(s);
            }
        }
    }

    /// The stream's index, or `None` for a stream this backend never made.
    fn stream_index(&self, stream: DeviceStream) -> Option<usize> {
        let index = stream.0 as usize;
        (index < self.streams.len()).then_some(index)
    }

    /// Moves the device errors raised by the call just made onto stream `s`.
    fn attribute_errors(&mut self, s: usize) {
        for error in self.errors.take() {
            let message = describe(&error);
            tracing::warn!(target: "gpuworld::stream", stream = s, %message, "wgpu error");
            self.streams[s].fault(message);
        }
    }

    /// Faults `s` and returns true when the device is lost.
    fn lost_on(&mut self, s: usize) -> bool {
        match self.errors.lost() {
            Some(reason) => {
                self.streams[s].fault(format!("wgpu device lost: {reason}"));
                true
            }
            None => false,
        }
    }

    /// Submits stream `s`'s batch; returns the submission's sequence number.
    fn submit(&mut self, s: usize) -> Option<u64> {
        let stream = &mut self.streams[s];
        let mut encoder = stream.take_encoder()?;
        if let Some(set) = stream.timing.take()
            && let Some(timing) = self.timing.as_mut()
        {
            timing.resolve(&mut encoder, set);
        }
        if let Some(marks) = self.marks.as_mut() {
            // The batch becomes the next submission.
            for stamp in stream.stamps.drain(..) {
                marks.resolve(&mut encoder, stamp, self.submitted + 1);
            }
        }
        let commands = encoder.finish();
        self.host_traffic.uploaded += UniformPool::upload(&self.queue, &stream.uniforms);
        UploadBelt::unmap(&stream.uploads);
        {
            // A submit polls too (wgpu-core maintains the queue after it): `DevicePolls`.
            let _polling = self.polls.0.lock();
            self.queue.submit([commands]);
        }
        self.submitted += 1;
        let seq = self.submitted;
        let completed = self.completed.clone();
        self.queue.on_submitted_work_done(move || {
            completed.fetch_max(seq, Ordering::AcqRel);
        });
        self.uniforms.retire(&mut stream.uniforms, seq);
        self.uploads.retire(&mut stream.uploads, seq);
        self.attribute_errors(s);
        Some(seq)
    }

    /// Submits stream `s`'s batch, if any, and returns the event after it. With nothing
    /// pending, everything the stream submitted is at or before the last submission: the queue
    /// runs submissions in order.
    fn flush_stream(&mut self, s: usize) -> DeviceEvent {
        DeviceEvent(self.submit(s).unwrap_or(self.submitted))
    }

    fn on_lost(&mut self, reason: &str) {
        if !self.lost_reported {
            self.lost_reported = true;
            tracing::error!(target: "gpuworld::stream", %reason, "wgpu device lost");
            for stream in &mut self.streams {
                stream.fault(format!("wgpu device lost: {reason}"));
            }
        }
        self.readbacks.abandon();
    }
}

impl Kernels for WgpuBackend {
    const NAME: &'static str = "wgpu";
    type Source = WgslSource;

    fn library_source(kernel: &KernelDef) -> Option<&'static WgslSource> {
        gpuworld_hal::library::source_in(&library::LIBRARY, kernel)
    }

    fn generated_text(kernel: &KernelDef) -> Option<String> {
        wgsl::wgsl_text(kernel)
    }

    fn warm_up(&mut self, kernel: Kernel, _mode: ExecutionMode) -> Result<(), Error> {
        // One pipeline serves both modes (the WGSL does not change with the mode).
        if let Some(reason) = self.errors.lost() {
            return Err(Error::device_fault(
                StreamId::GC,
                format!("wgpu device lost: {reason}"),
            ));
        }
        self.pipelines
            .get(&self.device, kernel, wgsl::Declared::AsSigned, StreamId::GC)
            .map(|_| ())
    }
}

impl Memory for WgpuBackend {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        let size = size.max(4).next_multiple_of(4);
        if size > self.limits.max_buffer_size {
            return Err(AllocError::BufferTooLarge {
                limit: self.limits.max_buffer_size,
            });
        }
        let over_capacity = self
            .config
            .memory_capacity
            .is_some_and(|capacity| self.allocated + size > capacity);
        if let Some(reason) = self.errors.lost() {
            return Err(AllocError::DeviceFailed {
                reason: format!("wgpu device lost: {reason}").into(),
            });
        }
        if over_capacity {
            return Err(AllocError::OutOfMemory);
        }
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpuworld storage"),
            size,
            // A renderer binds leased memory as vertices, indices or uniforms as well
            // (docs/render.md: the usages cost nothing measurable at creation or in dispatches).
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::INDIRECT
                | wgpu::BufferUsages::VERTEX
                | wgpu::BufferUsages::INDEX
                | wgpu::BufferUsages::UNIFORM,
            mapped_at_creation: false,
        });
        let raised = self.errors.take();
        if let Some(error) = raised.first() {
            tracing::warn!(target: "gpuworld::memory", size, error = %describe(error), "wgpu allocation failed");
            return Err(AllocError::OutOfMemory);
        }
        self.allocated += size;
        let key = self.buffers.insert(buffer);
        Ok(StorageId(key.data().as_ffi()))
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        if let Some(buffer) = self.buffers.remove(Self::storage_key(storage)) {
            self.allocated -= buffer.size();
            self.bind_groups.forget(storage);
            self.plans.forget(storage);
        }
    }

    fn staging(&self) -> Arc<dyn StagingAllocator> {
        self.readbacks.host()
    }
}

impl Queue for WgpuBackend {
    /// A replay of launches on one stream, recorded from its plan (`replay.rs`).
    fn graph_replay(
        graph: u64,
        version: u64,
        launches: std::sync::Arc<[gpuworld_hal::graph::PlannedLaunch]>,
    ) -> Option<gpuworld_hal::native::NativeWork> {
        Some(replay::WgpuReplay::work(graph, version, launches))
    }

    fn run_native(
        &mut self,
        stream: DeviceStream,
        buffers: &[Region],
        work: gpuworld_hal::native::NativeWork,
    ) -> Result<(), Error> {
        let Some(op) = replay::as_replay(&work) else {
            return Err(Error::Device(
                gpuworld_hal::error::DeviceError::BackendUnavailable {
                    backend: Self::NAME,
                    reason: format!("it runs no native work `{}`", work.name()).into(),
                },
            ));
        };
        let Some(s) = self.stream_index(stream) else {
            return Ok(());
        };
        if self.lost_on(s) {
            return Ok(());
        }
        let result = self.run_replay(s, buffers, op);
        self.attribute_errors(s);
        result
    }

    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        self.streams.push(WgpuStream::new(id));
        DeviceStream(self.streams.len() as u32 - 1)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        let Some(s) = self.stream_index(stream) else {
            return;
        };
        if self.lost_on(s) {
            return;
        }
        self.host_traffic.uploaded += data.len() as u64;
        if let Err(message) = self.record_write(s, dst, &data) {
            self.streams[s].fault(message);
        }
        self.attribute_errors(s);
    }

    /// A copy command between two buffers; within one, a dispatch (`copies.rs`). Offsets and
    /// size must be multiples of 4: wgpu copies whole words.
    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        let Some(s) = self.stream_index(stream) else {
            return;
        };
        if self.lost_on(s) {
            return;
        }
        if let Err(message) = self.record_copy(s, src, dst) {
            self.streams[s].fault(message);
        }
        self.attribute_errors(s);
    }

    unsafe fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        _mode: ExecutionMode,
    ) {
        let Some(s) = self.stream_index(stream) else {
            return;
        };
        if self.lost_on(s) {
            return;
        }
        if let Err(error) = self.record_launch(s, kernel, count, buffers, scalars) {
            tracing::warn!(target: "gpuworld::kernel", kernel = kernel.id, %error, "launch refused");
            self.streams[s].fail(error);
        }
        self.attribute_errors(s);
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        let ticket = self.readbacks.ticket();
        let Some(s) = self.stream_index(stream) else {
            self.readbacks.finish(ticket);
            return ticket;
        };
        let source = self.buffer(src.storage).cloned();
        match source {
            _ if src.size == 0 => self.readbacks.finish(ticket),
            _ if self.lost_on(s) => self.readbacks.finish(ticket),
            Some(source) if src.offset + src.size <= source.size() => {
                let stream = &mut self.streams[s];
                let encoder = stream.encoder(&self.device);
                self.readbacks.record(
                    &self.device,
                    encoder,
                    ticket,
                    s,
                    &source,
                    src.offset,
                    src.size,
                );
                stream.reads += 1;
                stream.commands += 1;
                self.host_traffic.read_back += src.size;
            }
            Some(_) => {
                self.streams[s].fault("read past the end of its buffer");
                self.readbacks.finish(ticket);
            }
            None => {
                self.streams[s].fault("read of freed memory");
                self.readbacks.finish(ticket);
            }
        }
        self.attribute_errors(s);
        ticket
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        match self.stream_index(stream) {
            // A lost device fails every later sync, as CUDA's failed context does.
            Some(s) if self.lost_on(s) => DeviceEvent(self.submitted),
            Some(s) => self.flush_stream(s),
            None => DeviceEvent(self.submitted),
        }
    }

    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.record_mark(stream)
    }

    fn wait_event(&mut self, _stream: DeviceStream, _event: DeviceEvent) {
        // One queue: the event's submission precedes every later submission of any stream.
    }
}

impl Completion for WgpuBackend {
    fn poll(&mut self, _tick: u64) {
        if let Some(reason) = self.errors.lost() {
            self.on_lost(&reason);
            return;
        }
        self.submit_due_batches();
        // Skipped while a wait polls (`DevicePolls`): its poll runs the same callbacks.
        let polled = self
            .polls
            .0
            .try_lock()
            .map(|_polling| self.device.poll(wgpu::PollType::Poll));
        if let Some(Err(error)) = polled {
            for stream in &mut self.streams {
                stream.fault(format!("polling the device failed: {error}"));
            }
        }
        let completed = self.completed();
        self.uniforms.recycle(completed);
        self.uploads.recycle(completed);
        for failed in self.readbacks.collect() {
            // A map fails when the device is gone: say so, where the loss is known by now.
            let message = match self.errors.lost() {
                Some(reason) => format!("{}: wgpu device lost: {reason}", failed.message),
                None => failed.message.to_owned(),
            };
            self.streams[failed.stream].fault(message);
        }
        if let Some(timing) = self.timing.as_mut() {
            timing.collect();
        }
        if let Some(marks) = self.marks.as_mut() {
            marks.collect();
        }
        // Errors outside any call of a stream (in callbacks) concern every stream.
        for error in self.errors.take() {
            let message = describe(&error);
            for stream in &mut self.streams {
                stream.fault(message.clone());
            }
        }
        if let Some(reason) = self.errors.lost() {
            self.on_lost(&reason);
        }
    }

    fn progress_watch(&mut self) -> Option<Box<dyn ProgressWatch>> {
        if self.errors.lost().is_some() {
            return None;
        }
        // A read recorded this tick is still in its stream's batch: waiting helps only once it
        // is submitted.
        self.submit_due_batches();
        (self.completed() < self.submitted).then(|| {
            Box::new(WgpuWatch {
                device: self.device.clone(),
                polls: self.polls.clone(),
            }) as Box<dyn ProgressWatch>
        })
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        event.0 <= self.completed() || self.errors.lost().is_some()
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.readbacks.take(ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        let s = self.stream_index(stream)?;
        self.streams[s].fault.take()
    }
}

impl DeviceTiming for WgpuBackend {
    fn device_elapsed(
        &mut self,
        start: DeviceEvent,
        end: DeviceEvent,
    ) -> Option<std::time::Duration> {
        self.marked_elapsed(start, end)
    }

    /// Dispatches get timestamp queries (where the adapter has them) while recording; copies
    /// and waits are then timed by submission.
    fn record_op_times(&mut self, on: bool) -> Option<OpClock> {
        if on && self.timing.is_none() {
            self.timing = Timing::new(&self.device, &self.queue);
        }
        let always = self.config.timestamps;
        let timing = self.timing.as_mut()?;
        timing.active = on || always;
        timing.set_recording(on);
        Some(OpClock::DeviceLaunches)
    }

    fn take_op_times(&mut self, into: &mut Vec<OpTime>) {
        if let Some(timing) = self.timing.as_mut() {
            timing.collect();
            timing.take_ops(into);
        }
    }
}

impl CrossDevice for WgpuBackend {}

impl Backend for WgpuBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Recorded plans (`replay.rs`); one queue: a replay over several streams records its
            // launches in the frame's order, one that every dependency between lanes follows.
            graph_replay: true,
            graph_replay_across_streams: true,
            progress_watch: true,
            ..Capabilities::default()
        }
    }

    fn lifecycle_lock() -> Option<&'static parking_lot::Mutex<()>> {
        Some(&DEVICE_LIFECYCLE)
    }

    fn device_index(&self) -> u32 {
        self.adapter_index
    }

    fn properties(&self) -> DeviceProperties {
        adapter::device_properties(
            &self.adapter_info,
            &self.limits,
            self.device.features(),
            self.config.memory_capacity,
        )
    }
}

/// A wait for the GPU without the backend: wgpu's device may be polled from any thread, and the
/// callbacks it runs (completions, mapped readbacks) write only to state shared with the backend.
struct WgpuWatch {
    device: wgpu::Device,
    /// The backend's poll lock, held while waiting.
    polls: DevicePolls,
}

impl ProgressWatch for WgpuWatch {
    fn wait(&mut self, timeout: std::time::Duration, interrupt: Option<&dyn Fn() -> bool>) {
        if interrupt.is_some_and(|interrupted| interrupted()) {
            return;
        }
        // A timeout is the wait's end; a lost device shows in the backend's next poll, which
        // the caller's next tick runs, as a fault on every stream.
        let _polling = self.polls.0.lock();
        if let Err(error) = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(timeout),
        }) && !matches!(error, wgpu::PollError::Timeout)
        {
            tracing::warn!(target: "gpuworld::wgpu", %error, "waiting for the device failed");
        }
    }
}

#![doc = include_str!("../README.md")]

mod adapter;
mod bind_groups;
mod copies;
mod device;
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
mod watch;
mod wgsl;
mod writes;

pub use adapter::{AdapterSelection, AdapterSummary, WgpuConfig, list_adapters};
pub use device::{HostTraffic, WgpuBackend, with_device_lifecycle};
pub use shared_device::{LimitShortfall, SharedDeviceError, required_limits};
pub use timing::KernelTiming;
pub use wgpu;
pub use wgsl::{WgslSource, wgsl_text};

use device::DEVICE_LIFECYCLE;
use faults::describe;
use gpuworld_hal::backend::*;
use gpuworld_hal::backend::{OpClock, OpTime};
use gpuworld_hal::error::Error;
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{ExecutionMode, Kernel, KernelDef};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use gpuworld_hal::open::{SchedulingDefaults, SchedulingStrategy};
use slotmap::Key;
use std::sync::Arc;
use stream::WgpuStream;
use timing::Timing;
use watch::WgpuWatch;

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

impl Kernels for WgpuBackend {
    const NAME: &'static str = faults::NAME;
    type Source = WgslSource;

    fn library_source(kernel: &KernelDef) -> Option<&'static WgslSource> {
        library::source(kernel)
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

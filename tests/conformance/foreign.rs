//! A backend from outside gpuworld, as a backend crate of its own would write it: the sim,
//! wrapped and renamed, implementing the public `Backend` and `OpenBackend` traits. It opens
//! through `ComputeClient::open` like the built-in backends and runs the whole suite, which
//! proves that a backend plugs in without an edit of the gpuworld crate.

use gpuworld::{
    Backend, BackendSettings, DeviceId, DeviceInfo, DeviceProperties, Error, ExecutionMode, Kernel,
    OpenBackend, SimBackend, SimConfig, StreamId,
};
use gpuworld_systems::backend::{
    AllocError, Capabilities, Completion, CrossDevice, DeviceEvent, DeviceStream, DeviceTiming,
    HostBytes, Kernels, LaunchCount, Memory, OpClock, OpTime, Queue, ReadTicket, Region, StorageId,
};

use std::time::Duration;

/// The sim under another name: every call goes to the sim it wraps.
pub struct ForeignSim(SimBackend);

impl OpenBackend for ForeignSim {
    type Config = SimConfig;

    fn device_config(index: u32) -> SimConfig {
        SimBackend::device_config(index)
    }

    fn open(config: SimConfig, settings: &BackendSettings) -> Result<ForeignSim, Error> {
        SimBackend::open(config, settings).map(ForeignSim)
    }

    fn enumerate() -> Vec<DeviceInfo> {
        SimBackend::enumerate()
            .into_iter()
            .map(|device| DeviceInfo {
                id: DeviceId {
                    backend: Self::NAME,
                    index: device.id.index,
                },
                ..device
            })
            .collect()
    }
}

impl Kernels for ForeignSim {
    const NAME: &'static str = "foreign-sim";
    type Source = <SimBackend as Kernels>::Source;
}

impl Memory for ForeignSim {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.0.allocate(size)
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        // SAFETY: the caller's guarantee for this backend is the wrapped sim's: it owns the buffer.
        unsafe { self.0.deallocate(storage) };
    }
}

impl Queue for ForeignSim {
    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        self.0.create_stream(id)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        self.0.write(stream, dst, data);
    }

    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        self.0.copy(stream, src, dst);
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
        // SAFETY: the caller's guarantee about the regions and the mode passes to the wrapped sim.
        unsafe { self.0.launch(stream, kernel, count, buffers, scalars, mode) }
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        self.0.read(stream, src)
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.0.flush(stream)
    }

    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.0.mark(stream)
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        self.0.wait_event(stream, event);
    }
}

impl Completion for ForeignSim {
    fn poll(&mut self, tick: u64) {
        self.0.poll(tick);
    }

    fn event_label(&self, event: DeviceEvent) -> String {
        self.0.event_label(event)
    }

    fn event_position(&self, event: DeviceEvent) -> Option<(DeviceStream, u64)> {
        self.0.event_position(event)
    }

    fn peek(&self, region: Region) -> Option<Vec<u8>> {
        self.0.peek(region)
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        self.0.event_done(event)
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.0.take_read(ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        self.0.take_fault(stream)
    }
}

impl DeviceTiming for ForeignSim {
    fn device_clock(&self) -> Option<Duration> {
        self.0.device_clock()
    }

    fn device_elapsed(&mut self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        self.0.device_elapsed(start, end)
    }

    fn record_op_times(&mut self, on: bool) -> Option<OpClock> {
        self.0.record_op_times(on)
    }

    fn take_op_times(&mut self, into: &mut Vec<OpTime>) {
        self.0.take_op_times(into);
    }
}

impl CrossDevice for ForeignSim {}

impl Backend for ForeignSim {
    fn capabilities(&self) -> Capabilities {
        // What it forwards of the sim: its clock.
        Capabilities {
            device_clock: self.0.capabilities().device_clock,
            ..Capabilities::default()
        }
    }

    fn properties(&self) -> DeviceProperties {
        self.0.properties()
    }

    fn device_index(&self) -> u32 {
        self.0.device_index()
    }

    fn begin_tick(&mut self, tick: u64) {
        self.0.begin_tick(tick);
    }

    fn end_tick(&mut self) {
        self.0.end_tick();
    }
}

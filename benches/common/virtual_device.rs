//! A virtual device for pool benchmarks and replays: it hands out numbered buffers, counts
//! what it allocated (bytes live, buffers and bytes over its life) and runs no work, so gigabytes
//! of reservations cost no host memory. Included by `benches/memory.rs` and
//! `systems/examples/pool_traces.rs`.

use gpuworld_systems::backend::{
    AllocError, Backend, DeviceEvent, DeviceProperties, DeviceStream, HostBytes, LaunchCount,
    MemoryLayout, ReadTicket, Region, StorageId,
};
use gpuworld_systems::error::Error;
use gpuworld_systems::ids::StreamId;
use gpuworld_systems::kernel::{CpuSource, ExecutionMode, Kernel};
use std::collections::HashMap;

/// A device that hands out numbered buffers and counts bytes; it runs no work.
pub struct VirtualDevice {
    memory_bytes: u64,
    /// Allocations past this many bytes live are refused (`memory_bytes`, unless unbounded).
    refuse_over: u64,
    alignment: u64,
    /// Bytes allocated and not yet freed.
    pub allocated: u64,
    /// Buffers allocated over its life.
    pub allocations: u64,
    /// Bytes of those buffers.
    pub bytes_allocated: u64,
    sizes: HashMap<u64, u64>,
    next: u64,
}

impl VirtualDevice {
    /// A device of `memory_bytes` whose buffers are aligned to `alignment` bytes.
    pub fn new(memory_bytes: u64, alignment: u64) -> VirtualDevice {
        VirtualDevice {
            memory_bytes,
            refuse_over: memory_bytes,
            alignment,
            allocated: 0,
            allocations: 0,
            bytes_allocated: 0,
            sizes: HashMap::new(),
            next: 0,
        }
    }

    /// A device that reports `memory_bytes` (which sizes the default ladder) but never refuses
    /// an allocation: a replay of any trace runs to its end.
    pub fn unbounded(memory_bytes: u64, alignment: u64) -> VirtualDevice {
        VirtualDevice {
            refuse_over: u64::MAX,
            ..VirtualDevice::new(memory_bytes, alignment)
        }
    }
}

impl Backend for VirtualDevice {
    const NAME: &'static str = "virtual";
    type Source = CpuSource;

    fn properties(&self) -> DeviceProperties {
        DeviceProperties {
            name: "virtual device".into(),
            memory_bytes: self.memory_bytes,
            alignment: self.alignment,
            memory_layout: MemoryLayout::Sliced,
            limits: Default::default(),
            features: Vec::new(),
            max_cube_count: [u32::MAX; 3],
            max_buffer_bytes: None,
        }
    }
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        if self.allocated.saturating_add(size) > self.refuse_over {
            return Err(AllocError::OutOfMemory);
        }
        self.next += 1;
        self.allocated += size;
        self.allocations += 1;
        self.bytes_allocated += size;
        self.sizes.insert(self.next, size);
        Ok(StorageId(self.next))
    }
    unsafe fn deallocate(&mut self, storage: StorageId) {
        self.allocated -= self.sizes.remove(&storage.0).unwrap_or(0);
    }
    fn create_stream(&mut self, _id: StreamId) -> DeviceStream {
        DeviceStream(0)
    }
    fn write(&mut self, _stream: DeviceStream, _dst: Region, _data: HostBytes) {}
    unsafe fn launch(
        &mut self,
        _stream: DeviceStream,
        _kernel: Kernel,
        _count: LaunchCount,
        _buffers: &[Region],
        _scalars: &[u32],
        _mode: ExecutionMode,
    ) {
    }
    fn read(&mut self, _stream: DeviceStream, _src: Region) -> ReadTicket {
        ReadTicket(0)
    }
    fn flush(&mut self, _stream: DeviceStream) -> DeviceEvent {
        DeviceEvent(0)
    }
    fn wait_event(&mut self, _stream: DeviceStream, _event: DeviceEvent) {}
    fn poll(&mut self, _tick: u64) {}
    fn event_done(&mut self, _event: DeviceEvent) -> bool {
        true
    }
    fn take_read(&mut self, _ticket: ReadTicket) -> Option<HostBytes> {
        None
    }
    fn take_fault(&mut self, _stream: DeviceStream) -> Option<Error> {
        None
    }
}

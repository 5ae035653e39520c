//! A virtual device for pool benchmarks and replays: it hands out numbered buffers, counts
//! what it allocated (bytes live, buffers and bytes over its life) and runs no work, so gigabytes
//! of reservations cost no host memory. Included by `benches/memory.rs` and
//! `systems/examples/pool_traces.rs`.

use gpuworld_systems::backend::{
    AllocError, Backend, Capabilities, Completion, CrossDevice, DeviceEvent, DeviceProperties,
    DeviceStream, DeviceTiming, HostBytes, Kernels, LaunchCount, Memory, MemoryLayout, Queue,
    ReadTicket, Region, StorageId,
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
    /// Pages of this many bytes can be mapped under reserved addresses (`None`: no mapping).
    pub page_mapping: Option<u64>,
    /// Reports making buffers as slow (`DeviceProperties::slow_buffers`, as wgpu does).
    pub slow_buffers: bool,
    /// Mapped pages by reserved range, to check the pool's calls.
    mapped: HashMap<u64, std::collections::BTreeSet<u64>>,
    /// Sizes of memory unmapped since the last trim, still allocated (as CUDA keeps it).
    spares: Vec<u64>,
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
            page_mapping: None,
            slow_buffers: false,
            mapped: HashMap::new(),
            spares: Vec::new(),
        }
    }

    /// A device that reports `memory_bytes` (which sizes the default ladder) but never refuses
    /// an allocation: a replay of any trace runs to its end.
    #[allow(dead_code)]
    pub fn unbounded(memory_bytes: u64, alignment: u64) -> VirtualDevice {
        VirtualDevice {
            refuse_over: u64::MAX,
            ..VirtualDevice::new(memory_bytes, alignment)
        }
    }
}

impl VirtualDevice {
    /// Whether every page under `len` bytes at `offset` of reserved range `storage` is mapped.
    #[allow(dead_code)]
    pub fn mapped_under(&self, storage: StorageId, offset: u64, len: u64) -> bool {
        let (Some(page), Some(pages)) = (self.page_mapping, self.mapped.get(&storage.0)) else {
            return false;
        };
        let first = offset / page * page;
        (first..offset + len.max(1))
            .step_by(page as usize)
            .all(|start| pages.contains(&start))
    }

    /// Reserved address ranges not yet freed.
    #[allow(dead_code)]
    pub fn address_ranges(&self) -> usize {
        self.mapped.len()
    }
}

impl Kernels for VirtualDevice {
    const NAME: &'static str = "virtual";
    type Source = CpuSource;
}

impl Memory for VirtualDevice {
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

    fn reserve_addresses(&mut self, _size: u64) -> Result<StorageId, AllocError> {
        self.next += 1;
        self.mapped.insert(self.next, Default::default());
        Ok(StorageId(self.next))
    }

    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError> {
        let page = self
            .page_mapping
            .expect("mapping asked of a device without it");
        assert!(
            offset.is_multiple_of(page) && len.is_multiple_of(page),
            "unaligned mapping"
        );
        // A spare of the size is mapped again; else new memory, with the spares returned first
        // when there is no room. A refused call maps nothing.
        let spare = self.spares.iter().position(|&size| size == len);
        match spare {
            Some(index) => {
                self.spares.swap_remove(index);
                self.allocated -= len;
            }
            None if self.allocated.saturating_add(len) > self.refuse_over => {
                Memory::trim_pages(self);
                if self.allocated.saturating_add(len) > self.refuse_over {
                    return Err(AllocError::OutOfMemory);
                }
            }
            None => {}
        }
        for start in (offset..offset + len).step_by(page as usize) {
            let fresh = self
                .mapped
                .get_mut(&storage.0)
                .expect("unknown range")
                .insert(start);
            assert!(fresh, "page {start} of range {} mapped twice", storage.0);
            self.allocated += page;
        }
        // One device allocation per call, as CUDA maps a call's pages from one `cuMemCreate`; a
        // spare mapped again is none.
        if spare.is_none() {
            self.allocations += 1;
            self.bytes_allocated += len;
        }
        Ok(())
    }

    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        let page = self
            .page_mapping
            .expect("unmapping asked of a device without it");
        for start in (offset..offset + len).step_by(page as usize) {
            let was = self
                .mapped
                .get_mut(&storage.0)
                .expect("unknown range")
                .remove(&start);
            assert!(
                was,
                "page {start} of range {} unmapped but not mapped",
                storage.0
            );
        }
        // Kept until the next trim, as CUDA keeps it.
        self.spares.push(len);
    }

    fn trim_pages(&mut self) {
        for size in self.spares.drain(..) {
            self.allocated -= size;
        }
    }

    unsafe fn free_addresses(&mut self, storage: StorageId) {
        let pages = self.mapped.remove(&storage.0).expect("unknown range");
        assert!(
            pages.is_empty(),
            "range {} freed with pages mapped",
            storage.0
        );
    }
}

impl Queue for VirtualDevice {
    fn create_stream(&mut self, _id: StreamId) -> DeviceStream {
        DeviceStream(0)
    }

    fn write(&mut self, _stream: DeviceStream, _dst: Region, _data: HostBytes) {}

    fn copy(&mut self, _stream: DeviceStream, _src: Region, _dst: Region) {}

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
}

impl Completion for VirtualDevice {
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

impl DeviceTiming for VirtualDevice {}

impl CrossDevice for VirtualDevice {}

impl Backend for VirtualDevice {
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn properties(&self) -> DeviceProperties {
        DeviceProperties {
            name: "virtual device".into(),
            memory_bytes: self.memory_bytes,
            alignment: self.alignment,
            memory_layout: MemoryLayout::Sliced,
            limits: Default::default(),
            features: Vec::new(),
            max_cube_count: [u32::MAX; 3],
            max_cube_dim: [u32::MAX; 3],
            max_units_per_cube: u32::MAX,
            max_buffer_bytes: None,
            page_mapping: self.page_mapping,
            // Pages go back as they were mapped, as CUDA's do.
            split_mappings: false,
            slow_buffers: self.slow_buffers,
        }
    }
}

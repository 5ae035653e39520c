//! gpuworld-cpu: the embedded default backend. Memory is host memory; a kernel is a Rust
//! function run once per cube, cubes spread over rayon's worker threads. Work runs when it is
//! submitted, so every event has passed by the time it is returned.

use gpuworld_systems::backend::*;
use gpuworld_systems::error::Error;
use gpuworld_systems::host_memory::HostMemory;
use gpuworld_systems::ids::StreamId;
use gpuworld_systems::kernel::{
    CubeContext, ExecutionMode, Kernel, KernelIo, SourceKind, panic_message,
};
use gpuworld_systems::sim::resolve_count;
use rayon::prelude::*;
use std::collections::HashMap;

/// Cubes per rayon job: small launches run inline, large ones are split.
const CUBES_PER_JOB: u64 = 16;

struct CpuStream {
    id: StreamId,
    fault: Option<Error>,
}

/// The CPU device.
pub struct CpuBackend {
    memory: HostMemory,
    streams: Vec<CpuStream>,
    reads: HashMap<ReadTicket, Vec<u8>>,
    next_ticket: u64,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl CpuBackend {
    /// A CPU device limited only by host memory.
    pub fn new() -> CpuBackend {
        CpuBackend::with_capacity(None)
    }

    /// A CPU device that refuses allocations beyond `capacity` bytes, when given.
    pub fn with_capacity(capacity: Option<u64>) -> CpuBackend {
        CpuBackend {
            memory: HostMemory::new(capacity),
            streams: Vec::new(),
            reads: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// Bytes allocated from the host.
    pub fn allocated(&self) -> u64 {
        self.memory.allocated()
    }

    fn fault(&mut self, stream: DeviceStream, error: Error) {
        if let Some(s) = self.streams.get_mut(stream.0 as usize) {
            s.fault.get_or_insert(error);
        }
    }

    fn stream_id(&self, stream: DeviceStream) -> StreamId {
        self.streams
            .get(stream.0 as usize)
            .map_or(StreamId { value: u64::MAX }, |s| s.id)
    }

    fn run(
        &self,
        stream: StreamId,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) -> Result<(), Error> {
        let source = kernel.cpu.ok_or(Error::MissingKernelSource {
            kernel: kernel.name,
            backend: Self::NAME,
        })?;
        let count = resolve_count(&self.memory, count)
            .ok_or_else(|| Error::device_fault(stream, "dynamic cube count in freed memory"))?;
        let views = buffers
            .iter()
            .map(|r| self.memory.view(*r))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::device_fault(stream, "kernel bound to freed memory"))?;
        let io = KernelIo::new(&views, scalars, mode);
        let total = u64::from(count[0]) * u64::from(count[1]) * u64::from(count[2]);
        let cube = |index: u64| {
            let x = index % u64::from(count[0]);
            let rest = index / u64::from(count[0]);
            let y = rest % u64::from(count[1]);
            let z = rest / u64::from(count[1]);
            let ctx = CubeContext {
                cube_pos: [x as u32, y as u32, z as u32],
                cube_count: count,
                cube_dim: kernel.cube_dim,
            };
            source(&ctx, &io);
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if total <= CUBES_PER_JOB {
                (0..total).for_each(cube);
            } else {
                let jobs = total.div_ceil(CUBES_PER_JOB);
                (0..jobs).into_par_iter().for_each(|job| {
                    let end = ((job + 1) * CUBES_PER_JOB).min(total);
                    (job * CUBES_PER_JOB..end).for_each(cube);
                });
            }
        }))
        .map_err(|payload| Error::KernelPanic {
            kernel: kernel.name,
            stream,
            message: panic_message(payload).into(),
        })
    }
}

impl Backend for CpuBackend {
    const NAME: &'static str = "cpu";
    const SOURCE: SourceKind = SourceKind::Cpu;

    fn properties(&self) -> DeviceProperties {
        DeviceProperties {
            name: format!("host CPU ({} threads)", rayon::current_num_threads()),
            memory_bytes: self.memory.capacity().unwrap_or(u64::MAX),
            alignment: 64,
            max_cube_count: [u32::MAX; 3],
            memory_layout: MemoryLayout::Sliced,
        }
    }

    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.memory.allocate(size)
    }

    fn deallocate(&mut self, storage: StorageId) {
        self.memory.deallocate(storage);
    }

    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        self.streams.push(CpuStream { id, fault: None });
        DeviceStream(self.streams.len() as u32 - 1)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: Vec<u8>) {
        if !self.memory.write(dst, &data) {
            let id = self.stream_id(stream);
            self.fault(stream, Error::device_fault(id, "write to freed memory"));
        }
    }

    fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) {
        let id = self.stream_id(stream);
        if let Err(error) = self.run(id, kernel, count, buffers, scalars, mode) {
            self.fault(stream, error);
        }
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        let ticket = ReadTicket(self.next_ticket);
        self.next_ticket += 1;
        let bytes = self.memory.read(src).unwrap_or_else(|| {
            let id = self.stream_id(stream);
            self.fault(stream, Error::device_fault(id, "read of freed memory"));
            Vec::new()
        });
        self.reads.insert(ticket, bytes);
        ticket
    }

    fn flush(&mut self, _stream: DeviceStream) -> DeviceEvent {
        // Work ran at submission: the event has passed already.
        DeviceEvent(0)
    }

    fn wait_event(&mut self, _stream: DeviceStream, _event: DeviceEvent) {}

    fn poll(&mut self, _tick: u64) {}

    fn event_done(&mut self, _event: DeviceEvent) -> bool {
        true
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<Vec<u8>> {
        self.reads.remove(&ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        self.streams.get_mut(stream.0 as usize)?.fault.take()
    }
}

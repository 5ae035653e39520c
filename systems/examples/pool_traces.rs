//! Replays the allocation-trace family of `benches/common/alloc_traces.rs` straight on a
//! `MemoryPool` over a virtual device that only counts (no client, no host memory): peak reserved
//! over peak in use and the device allocations of every shape and seed, in seconds. The fast loop
//! behind the pool rules of issue 25; `benches/alloc_traces.rs` measures the same through the
//! client on real backends (on cpu the two agree, exact and batched).
//!
//! Run: `cargo run --release -p gpuworld-systems --example pool_traces`. Environment:
//! `SCALE` (default 32), `SEEDS` (default `1,2,3,4,5`), `ALIGN` (device alignment, default 64, the
//! cpu backend's), `SHAPE` (one shape by name; default all).

#[path = "../../benches/common/alloc_traces.rs"]
mod alloc_traces;

use alloc_traces::{Event, Shape};
use gpuworld_systems::backend::{
    AllocError, Backend, DeviceEvent, DeviceProperties, DeviceStream, HostBytes, LaunchCount,
    MemoryLayout, ReadTicket, Region, StorageId,
};
use gpuworld_systems::error::Error;
use gpuworld_systems::ids::StreamId;
use gpuworld_systems::kernel::{CpuSource, ExecutionMode, Kernel};
use gpuworld_systems::memory::{AllocationMode, MemoryConfig, MemoryPool, SliceKey};
use std::collections::HashMap;

/// A device that hands out numbered buffers and counts them; it runs no work.
struct CountingDevice {
    alignment: u64,
    next: u64,
    allocations: u64,
    bytes_allocated: u64,
}

impl Backend for CountingDevice {
    const NAME: &'static str = "counting";
    type Source = CpuSource;

    fn properties(&self) -> DeviceProperties {
        DeviceProperties {
            name: "counting device".into(),
            memory_bytes: 8 << 30,
            alignment: self.alignment,
            memory_layout: MemoryLayout::Sliced,
            limits: Default::default(),
            features: Vec::new(),
            max_cube_count: [u32::MAX; 3],
            max_buffer_bytes: None,
        }
    }
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.next += 1;
        self.allocations += 1;
        self.bytes_allocated += size;
        Ok(StorageId(self.next))
    }
    unsafe fn deallocate(&mut self, _storage: StorageId) {}
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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |value| {
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: `{value}` is not a number"))
    })
}

fn main() {
    let scale = env_u64("SCALE", 32);
    let alignment = env_u64("ALIGN", 64);
    let seeds: Vec<u64> = std::env::var("SEEDS").map_or_else(
        |_| vec![1, 2, 3, 4, 5],
        |list| {
            list.split(',')
                .map(|seed| {
                    seed.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("SEEDS: `{seed}` is not a number"))
                })
                .collect()
        },
    );
    let only = std::env::var("SHAPE").ok();
    println!(
        "scale {scale}, alignment {alignment}, seeds {seeds:?}\n\n| shape | peak reserved / peak in use | device allocations (all seeds) | GiB allocated (all seeds) | per seed: ratio, allocations |\n| --- | --- | --- | --- | --- |"
    );
    for shape in Shape::ALL {
        if only.as_deref().is_some_and(|name| name != shape.name()) {
            continue;
        }
        let (mut low, mut high) = (f64::INFINITY, 0f64);
        let (mut allocations, mut bytes) = (0, 0);
        let mut per_seed = Vec::new();
        for &seed in &seeds {
            let trace = shape.generate(seed, scale);
            let mut device = CountingDevice {
                alignment,
                next: 0,
                allocations: 0,
                bytes_allocated: 0,
            };
            let mut pool = MemoryPool::new(&device.properties(), &MemoryConfig::default());
            let mut live: HashMap<u32, SliceKey> = HashMap::new();
            for event in &trace.events {
                match *event {
                    Event::Alloc { id, bytes, .. } => {
                        let reservation = pool
                            .reserve(&mut device, bytes, AllocationMode::Auto)
                            .unwrap_or_else(|error| panic!("{bytes} bytes refused: {error}"));
                        live.insert(id, reservation.slice);
                    }
                    Event::Free { id } => {
                        let key = live.remove(&id).expect("the trace frees a live buffer");
                        pool.release(key)
                            .unwrap_or_else(|error| panic!("release failed: {error}"));
                    }
                }
            }
            let ratio = pool.peak_reserved() as f64 / trace.peak_live_bytes.max(1) as f64;
            low = low.min(ratio);
            high = high.max(ratio);
            allocations += device.allocations;
            bytes += device.bytes_allocated;
            per_seed.push(format!("{ratio:.3}, {}", device.allocations));
        }
        println!(
            "| {} | {low:.3}–{high:.3} | {allocations} | {:.1} | {} |",
            shape.name(),
            bytes as f64 / (1u64 << 30) as f64,
            per_seed.join("; ")
        );
    }
}

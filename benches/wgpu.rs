//! The wgpu backend against raw wgpu in the same process, on the default adapter: the cost of
//! one dispatch (`DISPATCHES` fills of one cube, then a sync, per sample) through gpuworld and as
//! one encoder of the same dispatches submitted and waited for; readback latency of 4 bytes and
//! of 64 MiB through `read_one` and as copy + map + wait; and the round trip of a launch and a
//! 4-byte read (`fill` then `read_one`, against one encoder of the dispatch and the copy, mapped
//! and waited for). The client's other rows, on wgpu beside cpu, are in `client.rs`.
//!
//! Run: `cargo bench --bench wgpu --features wgpu -- --quick`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::wgpu;
use gpuworld::{Bindings, ComputeClient, CubeCount, WgpuBackend, WgpuConfig, library};
use std::hint::black_box;

/// Dispatches per sample of the dispatch benchmark.
const DISPATCHES: u64 = 1000;
/// Readback sizes: 4 bytes and 64 MiB.
const READ_SIZES: [(u64, &str); 2] = [(4, "4B"), (64 << 20, "64MiB")];

#[path = "common/raw_wgpu.rs"]
mod raw_wgpu;

/// Raw wgpu: a device of its own on the same default adapter, and FILL's pipeline.
struct Raw {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    out: wgpu::Buffer,
}

impl Raw {
    fn new() -> Raw {
        let fill = gpuworld_wgpu::wgsl_text(&library::FILL).expect("fill has WGSL");
        let (device, queue, pipeline) = raw_wgpu::device_and_pipeline(&fill)
            .expect("an adapter and a device (the bench needs one)");
        let out = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 1024,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let scalars = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&scalars, 0, bytemuck::cast_slice(&[1.0f32, 0.0, 0.0, 0.0]));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: out.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: scalars.as_entire_binding(),
                },
            ],
        });
        Raw {
            device,
            queue,
            pipeline,
            group,
            out,
        }
    }

    fn wait(&self) {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("the device completes its work");
    }

    fn dispatches(&self, count: u64) {
        raw_wgpu::one_pass(
            &self.device,
            &self.queue,
            &self.pipeline,
            &self.group,
            count,
            1,
        );
    }

    /// One fill dispatch and a copy of its first 4 bytes into `staging`, mapped on submit,
    /// submitted and waited for.
    fn fill_and_read(&self, staging: &wgpu::Buffer) -> Vec<u8> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.group, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.copy_buffer_to_buffer(&self.out, 0, staging, 0, 4);
        encoder.map_buffer_on_submit(staging, wgpu::MapMode::Read, 0..4, |r| {
            r.expect("staging maps");
        });
        self.queue.submit([encoder.finish()]);
        self.wait();
        let bytes = staging
            .get_mapped_range(0..4)
            .expect("staging is mapped")
            .to_vec();
        staging.unmap();
        bytes
    }

    fn storage(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    fn staging(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn read(&self, source: &wgpu::Buffer, staging: &wgpu::Buffer) -> Vec<u8> {
        let size = source.size();
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(source, 0, staging, 0, size);
        encoder.map_buffer_on_submit(staging, wgpu::MapMode::Read, .., |r| {
            r.expect("staging maps");
        });
        self.queue.submit([encoder.finish()]);
        self.wait();
        let bytes = staging
            .get_mapped_range(..)
            .expect("staging is mapped")
            .to_vec();
        staging.unmap();
        bytes
    }
}

fn client() -> ComputeClient<WgpuBackend> {
    gpuworld::wgpu_client(WgpuConfig::default()).expect("a wgpu adapter (the bench needs one)")
}

fn dispatch_cost(c: &mut Criterion) {
    let client = client();
    let raw = Raw::new();
    let out = client.empty(1024);
    let mut group = c.benchmark_group("wgpu_dispatch");
    group.throughput(Throughput::Elements(DISPATCHES));
    group.bench_function("gpuworld", |b| {
        b.iter(|| {
            for _ in 0..DISPATCHES {
                client
                    .launch(
                        &library::FILL,
                        CubeCount::new_1d(1),
                        Bindings::new().buffer(&out).scalar_f32(1.0),
                    )
                    .expect("launch");
            }
            client.sync().expect("sync");
        });
    });
    group.bench_function("raw_wgpu", |b| b.iter(|| raw.dispatches(DISPATCHES)));
    group.finish();
}

fn readback_latency(c: &mut Criterion) {
    let client = client();
    let raw = Raw::new();
    let mut group = c.benchmark_group("wgpu_readback");
    for (size, name) in READ_SIZES {
        let handle = client.empty(size);
        client.sync().expect("sync");
        let (source, staging) = (raw.storage(size), raw.staging(size));
        if size > 1 << 20 {
            group.sample_size(20);
        }
        group.throughput(Throughput::Bytes(size));
        group.bench_function(format!("gpuworld/{name}"), |b| {
            b.iter(|| black_box(client.read_one(&handle).expect("read")));
        });
        group.bench_function(format!("raw_wgpu/{name}"), |b| {
            b.iter(|| black_box(raw.read(&source, &staging)));
        });
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let client = client();
    let raw = Raw::new();
    let out = client.empty(1024);
    let first_word = out.clone().offset_end(1020);
    let staging = raw.staging(4);
    let mut group = c.benchmark_group("wgpu_round_trip");
    group.bench_function("gpuworld/fill_read_4B", |b| {
        b.iter(|| {
            client
                .launch(
                    &library::FILL,
                    CubeCount::new_1d(1),
                    Bindings::new().buffer(&out).scalar_f32(1.0),
                )
                .expect("launch");
            black_box(client.read_one(&first_word).expect("read").len())
        });
    });
    group.bench_function("raw_wgpu/fill_read_4B", |b| {
        b.iter(|| black_box(raw.fill_and_read(&staging)))
    });
    group.finish();
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, dispatch_cost, readback_latency, round_trip);
}
criterion_main!(group::benches);

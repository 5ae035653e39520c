//! Transfers and collectives between cpu devices, through the public API, beside the same work
//! done by hand through the same API (read back on one device, reduce on the host, write on the
//! others) and beside a plain host copy: what `to_client` and the host collectives cost on top
//! of the bytes they move.
//!
//! Run: `cargo bench --bench transfers -- --quick`.

use criterion::{Criterion, Throughput};
use gpuworld::collective::{ElemType, Group, ReduceOp, reduce_host};
use gpuworld::{Driver, cpu_clients};
use std::time::Duration;

/// Bytes per transfer.
const COPY_BYTES: usize = 64 << 20;
/// Bytes per rank of the all_reduce, and its ranks.
const REDUCE_BYTES: usize = 16 << 20;
const RANKS: usize = 4;

fn to_client(c: &mut Criterion) {
    let clients = cpu_clients(2, Driver::DeviceThread);
    let (a, b) = (&clients[0], &clients[1]);
    let host = vec![7u8; COPY_BYTES];
    let source = a.create_from_slice(&host);
    a.sync().expect("upload");
    let mut group = c.benchmark_group("transfers/64MiB");
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    group.bench_function("to_client_cpu0_to_cpu1", |bench| {
        bench.iter(|| {
            let copy = a.to_client(&source, b).expect("to_client");
            b.sync().expect("arrived");
            copy
        })
    });
    group.bench_function("by_hand_read_one_then_create", |bench| {
        bench.iter(|| {
            let bytes = a.read_one(&source).expect("read");
            let copy = b.create(bytes.into_vec());
            b.sync().expect("written");
            copy
        })
    });
    let mut target = vec![0u8; COPY_BYTES];
    group.bench_function("host_memcpy", |bench| {
        bench.iter(|| target.copy_from_slice(&host))
    });
    group.finish();
}

fn all_reduce(c: &mut Criterion) {
    let group = Group::new(cpu_clients(RANKS, Driver::DeviceThread)).expect("distinct devices");
    let buffers: Vec<_> = group
        .clients()
        .iter()
        .map(|c| c.create_from_slice(&vec![0u8; REDUCE_BYTES]))
        .collect();
    let bindings: Vec<_> = buffers.iter().map(|h| h.binding()).collect();
    group.sync_collective().expect("uploads");
    let mut bench = c.benchmark_group("transfers/all_reduce_4x16MiB_f32");
    bench.throughput(Throughput::Bytes(REDUCE_BYTES as u64));
    bench.bench_function("group_all_reduce", |b| {
        b.iter(|| {
            group
                .all_reduce(&bindings, ElemType::F32, ReduceOp::Sum)
                .expect("all_reduce");
            group.sync_collective().expect("ran");
        })
    });
    bench.bench_function("by_hand_read_reduce_write", |b| {
        b.iter(|| {
            let inputs: Vec<_> = group
                .clients()
                .iter()
                .zip(&buffers)
                .map(|(c, h)| c.read_one(h).expect("read"))
                .collect();
            let slices: Vec<&[u8]> = inputs.iter().map(|b| &b[..]).collect();
            let sum = reduce_host(&slices, ElemType::F32, ReduceOp::Sum).expect("reduce");
            for (client, handle) in group.clients().iter().zip(&buffers) {
                client.write(handle, &sum).expect("write");
            }
            group.sync_collective().expect("written");
        })
    });
    bench.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    to_client(&mut c);
    all_reduce(&mut c);
    c.final_summary();
}

//! A step of chained small kernels issued eagerly against the same step captured once and
//! replayed (issue 28), through the public client with the device thread, on cpu, wgpu (with
//! `--features wgpu`) and CUDA (`--features cuda`, on the GPU machine): per kernel, `K` launches
//! of `ADD` (`x += ones`, 256 floats: each depends on the one before) then a `sync`, as a user's
//! frame would. The result is checked after each group, and the memory reserved and at its peak
//! is reported beside the times.
//!
//! `cargo bench --bench graph [--features wgpu,cuda]`; `GPUWORLD_GRAPH_KERNELS=100,1000` sets the
//! step sizes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Handle, library};

const FLOATS: usize = 256;

fn kernels() -> Vec<usize> {
    std::env::var("GPUWORLD_GRAPH_KERNELS")
        .ok()
        .map(|list| {
            list.split(',')
                .map(|k| {
                    k.trim()
                        .parse()
                        .expect("GPUWORLD_GRAPH_KERNELS: whole numbers")
                })
                .collect()
        })
        .unwrap_or_else(|| vec![100, 1000])
}

/// The step: `k` chained `x += ones`.
fn step<B: Backend>(client: &ComputeClient<B>, x: &Handle, ones: &Handle, k: usize) {
    for _ in 0..k {
        client
            .launch(
                &library::ADD,
                CubeCount::new_1d(1),
                Bindings::new().buffer(x).buffer(ones).buffer(x),
            )
            .expect("launch");
    }
}

fn bench_backend<B: Backend>(c: &mut Criterion, name: &str, client: ComputeClient<B>) {
    let mut group = c.benchmark_group(format!("graph/{name}"));
    group.sample_size(20);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(2));
    for k in kernels() {
        let x = client.create_from_pod(&[0.0f32; FLOATS]);
        let ones = client.create_from_pod(&[1.0f32; FLOATS]);
        group.throughput(Throughput::Elements(k as u64));
        let mut issued = 0u64;
        group.bench_function(format!("eager/{k}"), |b| {
            b.iter(|| {
                step(&client, &x, &ones, k);
                client.sync().expect("sync");
                issued += k as u64;
            })
        });
        let capture_start = std::time::Instant::now();
        let graph = client
            .capture(|c| {
                step(c, &x, &ones, k);
                Ok(())
            })
            .expect("capture");
        client.sync().expect("sync");
        let capture = capture_start.elapsed();
        issued += k as u64;
        group.bench_function(format!("replay/{k}"), |b| {
            b.iter(|| {
                graph.replay().expect("replay");
                client.sync().expect("sync");
                issued += k as u64;
            })
        });
        let value = client.read_one_as::<f32>(&x).expect("read")[0];
        assert_eq!(
            value as u64, issued,
            "every kernel ran once: {value} against {issued}"
        );
        let usage = client.memory_usage();
        eprintln!(
            "graph/{name}/{k}: capture (warm-up run included) {:.1} µs; reserved {} B, peak in use {} B",
            capture.as_secs_f64() * 1e6,
            usage.bytes_reserved,
            client.with_runtime(|rt| rt.peak_memory()),
        );
    }
    group.finish();
}

fn graphs(c: &mut Criterion) {
    match gpuworld::cpu_client(Driver::DeviceThread) {
        Ok(client) => bench_backend(c, "cpu", client),
        Err(error) => eprintln!("SKIPPED cpu: {error}"),
    }
    #[cfg(feature = "wgpu")]
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => bench_backend(c, "wgpu", client),
        Err(error) => eprintln!("SKIPPED wgpu: no adapter: {error}"),
    }
    #[cfg(feature = "cuda")]
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => bench_backend(c, "cuda", client),
        Err(error) => eprintln!("SKIPPED cuda: {error}"),
    }
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, graphs);
}
criterion_main!(group::benches);

//! The library's tunables on every backend built into this test binary: each reduce-sum variant
//! and each matmul tiling matches a host reference, and tuning each set picks a winner whose
//! result is right. A backend is added with one line of the `backend_suite!` below (`optional`
//! for backends that may have no device here: a `Skip` reports the case ignored): cpu, sim, and
//! wgpu and cuda under their features.

mod common;

use gpuworld::tune::Tuner;
use gpuworld::tune::{CacheLocation, MatmulInput, ReduceInput, matmul_set, reduce_sum_set};
use gpuworld::{Backend, ComputeClient, Handle};
use std::sync::Arc;

/// Lengths around the variants' boundaries: one cube, several passes, a strided remainder.
const REDUCE_LENGTHS: [u32; 6] = [1, 255, 256, 1000, 70_001, 300_000];
/// Shapes (m, n, k) that are not multiples of any tile.
const MATMUL_SHAPES: [(u32, u32, u32); 4] = [(1, 1, 1), (17, 33, 9), (70, 65, 130), (128, 64, 32)];

fn values(len: u32, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i.wrapping_mul(31).wrapping_add(seed)) % 23) as f32 / 8.0 - 1.0)
        .collect()
}

fn assert_close(got: &[f32], expected: &[f64], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        let scale = 1.0f64.max(e.abs());
        assert!(
            (f64::from(*g) - e).abs() <= 1e-3 * scale,
            "{what}: element {i} is {g}, expected {e}"
        );
    }
}

fn reduce_input<B: Backend>(client: &ComputeClient<B>, len: u32) -> (ReduceInput, f64) {
    let data = values(len, 3);
    let sum = data.iter().map(|&v| f64::from(v)).sum();
    let input = client.create_from_slice(bytemuck::cast_slice(&data));
    (ReduceInput { input, len }, sum)
}

fn matmul_input<B: Backend>(
    client: &ComputeClient<B>,
    (m, n, k): (u32, u32, u32),
) -> (MatmulInput, Vec<f64>) {
    let a = values(m * k, 1);
    let b = values(k * n, 7);
    let mut c = vec![0.0f64; (m * n) as usize];
    for row in 0..m as usize {
        for col in 0..n as usize {
            c[row * n as usize + col] = (0..k as usize)
                .map(|kk| f64::from(a[row * k as usize + kk]) * f64::from(b[kk * n as usize + col]))
                .sum();
        }
    }
    let input = MatmulInput {
        a: client.create_from_slice(bytemuck::cast_slice(&a)),
        b: client.create_from_slice(bytemuck::cast_slice(&b)),
        m,
        n,
        k,
    };
    (input, c)
}

fn read(client: &ComputeClient<impl Backend>, handle: &Handle) -> Vec<f32> {
    client.read_one_as(handle).unwrap()
}

/// The suite's cases, each run on every backend.
mod cases {
    use super::*;

    pub fn every_reduce_sum_variant_matches_the_host_sum<B: Backend>(client: ComputeClient<B>) {
        let set = reduce_sum_set::<B>();
        for len in REDUCE_LENGTHS {
            let (input, sum) = reduce_input(&client, len);
            for candidate in set.candidates() {
                let out = (candidate.op())(&client, &input).unwrap();
                assert_close(
                    &read(&client, &out),
                    &[sum],
                    &format!("{} of {len}", candidate.name()),
                );
            }
        }
    }

    pub fn every_matmul_tiling_matches_the_host_product<B: Backend>(client: ComputeClient<B>) {
        let set = matmul_set::<B>();
        for shape in MATMUL_SHAPES {
            let (input, expected) = matmul_input(&client, shape);
            for candidate in set.candidates() {
                let out = (candidate.op())(&client, &input).unwrap();
                assert_close(
                    &read(&client, &out),
                    &expected,
                    &format!("{} of {shape:?}", candidate.name()),
                );
            }
        }
    }

    fn quick_tuner<B: Backend>(client: &ComputeClient<B>) -> Tuner<B> {
        common::quick_tuner(client, CacheLocation::Disabled)
    }

    pub fn the_tuned_reduce_sum_gives_the_host_sum<B: Backend>(client: ComputeClient<B>) {
        let tuner = quick_tuner(&client);
        let set = Arc::new(reduce_sum_set::<B>());
        let (input, sum) = reduce_input(&client, 5000);
        let out = tuner.execute(&set, &input).unwrap();
        assert_close(&read(&client, &out), &[sum], "tuned reduce");
        let key = gpuworld::tune::reduce_key(&input).to_string();
        client.tick();
        assert!(
            client
                .with_tune_cache(|cache| cache.winner(set.name(), &key, set.checksum()))
                .is_some(),
            "the winner reached the world's cache"
        );
    }

    pub fn the_tuned_matmul_gives_the_host_product<B: Backend>(client: ComputeClient<B>) {
        let tuner = quick_tuner(&client);
        let set = Arc::new(matmul_set::<B>());
        let (input, expected) = matmul_input(&client, (40, 24, 36));
        let out = tuner.execute(&set, &input).unwrap();
        assert_close(&read(&client, &out), &expected, "tuned matmul");
    }
}

backend_suite! {
    cases: [
        cases::every_reduce_sum_variant_matches_the_host_sum,
        cases::every_matmul_tiling_matches_the_host_product,
        cases::the_tuned_reduce_sum_gives_the_host_sum,
        cases::the_tuned_matmul_gives_the_host_product,
    ];
    cpu: gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    sim: gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    #[cfg(feature = "wgpu")]
    wgpu: optional crate::common::wgpu_client_or_skip();
    #[cfg(feature = "cuda")]
    cuda: optional crate::common::cuda_client_or_skip();
}

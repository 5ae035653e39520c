//! The `gpuworld.matmul` tunable set: the library's matmul tilings (`library::matmul`), keyed
//! by the power-of-two buckets of (m, n, k), benchmarked on generated matrices of the buckets'
//! sizes. Output: a handle of the m×n `f32` product.

use super::checks::compare_f32_outputs;
use super::key::{TuneKey, pow2_bucket};
use super::tunable::TunableSet;
use crate::{Bindings, ComputeClient};
use gpuworld_systems::library::matmul::{
    MATMUL_4X4, MATMUL_4X4_TILE, MATMUL_CUBE, MATMUL_NAIVE, MATMUL_TILED16,
};
use gpuworld_systems::{Backend, CubeCount, Handle, Kernel, Result};

/// The set's name.
pub const MATMUL_SET: &str = "gpuworld.matmul";
/// Relative tolerance of the output check: the tilings add in different orders.
const TOLERANCE: f32 = 1e-3;

/// `a` (m×k) times `b` (k×n), row-major `f32`.
#[derive(Clone, Debug)]
pub struct MatmulInput {
    /// The left matrix.
    pub a: Handle,
    /// The right matrix.
    pub b: Handle,
    /// Rows of `a` and of the product.
    pub m: u32,
    /// Columns of `b` and of the product.
    pub n: u32,
    /// Columns of `a`, rows of `b`.
    pub k: u32,
}

/// The matmul candidates: `naive` (one output per unit), `4x4` (16 outputs per unit) and
/// `tiled16` (16×16 tiles staged in workgroup memory).
pub fn matmul_set<B: Backend>() -> TunableSet<B, MatmulInput, Handle> {
    TunableSet::new(MATMUL_SET, matmul_key, matmul_inputs)
        .candidate("naive", |client, input: &MatmulInput| {
            multiply(client, &MATMUL_NAIVE, MATMUL_CUBE, input)
        })
        .candidate("4x4", |client, input: &MatmulInput| {
            multiply(client, &MATMUL_4X4, MATMUL_4X4_TILE, input)
        })
        .candidate("tiled16", |client, input: &MatmulInput| {
            multiply(client, &MATMUL_TILED16, MATMUL_CUBE, input)
        })
        .output_check(|client, reference, other| {
            compare_f32_outputs(client, reference, other, TOLERANCE)
        })
}

/// The key of a matmul: the power-of-two buckets of m, n and k.
pub fn matmul_key(input: &MatmulInput) -> TuneKey {
    TuneKey::new([input.m, input.n, input.k].map(|d| pow2_bucket(u64::from(d))))
}

/// Matrices of the key's sizes with small values.
fn matmul_inputs<B: Backend>(
    client: &ComputeClient<B>,
    key: &TuneKey,
    _input: &MatmulInput,
) -> Result<MatmulInput> {
    let (m, n, k) = (key.part(0), key.part(1), key.part(2));
    let matrix = |len: u64, seed: u64| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed) % 11) as f32 / 8.0 - 0.5)
            .collect()
    };
    let a = matrix(u64::from(m) * u64::from(k), 1);
    let b = matrix(u64::from(k) * u64::from(n), 5);
    Ok(MatmulInput {
        a: client.create_from_slice(bytemuck::cast_slice(&a)),
        b: client.create_from_slice(bytemuck::cast_slice(&b)),
        m,
        n,
        k,
    })
}

/// Launches `kernel`, whose cubes cover `tile`×`tile` outputs each, into a new product handle.
fn multiply<B: Backend>(
    client: &ComputeClient<B>,
    kernel: Kernel,
    tile: u32,
    input: &MatmulInput,
) -> Result<Handle> {
    let elements = (u64::from(input.m) * u64::from(input.n)).max(1);
    let c = client.empty(elements * 4);
    let bindings = Bindings::new()
        .buffer(&input.a)
        .buffer(&input.b)
        .buffer(&c)
        .scalar_u32(input.m)
        .scalar_u32(input.n)
        .scalar_u32(input.k);
    client.launch(
        kernel,
        CubeCount::covering_2d(input.n, input.m, tile),
        bindings,
    )?;
    Ok(c)
}

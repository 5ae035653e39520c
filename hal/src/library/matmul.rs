//! Matmul tilings, the candidates of the `matmul` tunable set: `c = a · b` for row-major `f32`
//! matrices `a` (m×k), `b` (k×n), `c` (m×n) — buffers: a, b, c; scalars: m, n, k. Every variant
//! runs 16×16 units per cube: one output element per unit, 4×4 per unit (a cube covers 64×64),
//! or one per unit with 16×16 tiles of `a` and `b` staged in workgroup memory. Elements outside
//! the matrices read as zero and are never written.

use crate::kernel::{BufferIo, CpuSource, CubeContext, KernelDef, KernelIo, Param, Signature};
use std::sync::atomic::{AtomicU32, Ordering};

/// Units per cube side of every matmul variant.
pub const MATMUL_CUBE: u32 = 16;
/// Output elements per cube side of [`MATMUL_4X4`].
pub const MATMUL_4X4_TILE: u32 = 4 * MATMUL_CUBE;

/// What every variant binds: `a`, `b`, `c` and the dimensions.
const SIGNATURE: Signature = Signature {
    buffers: &[
        Param::f32("a").read_only(),
        Param::f32("b").read_only(),
        Param::f32("c"),
    ],
    scalars: &[Param::u32("m"), Param::u32("n"), Param::u32("k")],
    cube_dim: [MATMUL_CUBE, MATMUL_CUBE, 1],
};

/// The launch's dimensions `(m, n, k)`.
fn dims(io: &KernelIo<'_>) -> (usize, usize, usize) {
    (
        io.scalar_u32(0) as usize,
        io.scalar_u32(1) as usize,
        io.scalar_u32(2) as usize,
    )
}

/// `c[row][col]`, summing over `k` in order. The GPU variants sum in tiles of `k`, but each unit
/// still adds its products in order, so one CPU sum serves every variant.
fn dot(a: BufferIo<'_>, b: BufferIo<'_>, row: usize, col: usize, n: usize, k: usize) -> f32 {
    let a_row = a.words(row * k..row * k + k);
    let b_col = b.words(col..col + k.saturating_sub(1) * n + 1);
    match (a_row, b_col) {
        // Both in bounds: no check per product.
        (Some(a_row), Some(b_col)) => a_row
            .iter()
            .zip(b_col.iter().step_by(n.max(1)))
            .fold(0.0, |acc, (x, y)| acc + load_f32(x) * load_f32(y)),
        _ => (0..k).fold(0.0, |acc, kk| {
            acc + a.load_f32(row * k + kk) * b.load_f32(kk * n + col)
        }),
    }
}

fn load_f32(word: &AtomicU32) -> f32 {
    f32::from_bits(word.load(Ordering::Relaxed))
}

/// Computes the `tile x tile` output block of this cube, one element at a time.
fn multiply_block(ctx: &CubeContext, io: &KernelIo<'_>, tile: usize) {
    let (m, n, k) = dims(io);
    let row0 = ctx.cube_pos[1] as usize * tile;
    let col0 = ctx.cube_pos[0] as usize * tile;
    let (a, b, c) = (io.buffer(0), io.buffer(1), io.buffer(2));
    for row in row0..(row0 + tile).min(m) {
        for col in col0..(col0 + tile).min(n) {
            c.store_f32(row * n + col, dot(a, b, row, col, n, k));
        }
    }
}

/// One output element per unit; launch `covering_2d(n, m, 16)` cubes.
pub static MATMUL_NAIVE: KernelDef = KernelDef {
    id: "gpuworld.matmul_naive",
    name: "matmul_naive",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_CUBE as usize)
    })],
};

/// A 4×4 block of outputs per unit; launch `covering_2d(n, m, 64)` cubes.
pub static MATMUL_4X4: KernelDef = KernelDef {
    id: "gpuworld.matmul_4x4",
    name: "matmul_4x4",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_4X4_TILE as usize)
    })],
};

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory; launch
/// `covering_2d(n, m, 16)` cubes.
pub static MATMUL_TILED16: KernelDef = KernelDef {
    id: "gpuworld.matmul_tiled16",
    name: "matmul_tiled16",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_CUBE as usize);
    })],
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuBuffer, ExecutionMode};

    fn matrix(len: usize, seed: f32) -> Vec<AtomicU32> {
        (0..len)
            .map(|i| AtomicU32::new((i as f32 * seed - 3.0).to_bits()))
            .collect()
    }

    #[test]
    fn every_variant_sums_in_order_and_reads_zero_past_a_short_binding() {
        let (m, n, k) = (20usize, 18usize, 7usize);
        for (a_len, b_len) in [(m * k, k * n), (m * k - 5, k * n), (m * k, k * n - 3)] {
            let (a, b) = (matrix(a_len, 0.25), matrix(b_len, -0.5));
            let element = |words: &[AtomicU32], i: usize| {
                words
                    .get(i)
                    .map_or(0.0, |w| f32::from_bits(w.load(Ordering::Relaxed)))
            };
            let expected: Vec<u32> = (0..m * n)
                .map(|i| {
                    let (row, col) = (i / n, i % n);
                    let products =
                        (0..k).map(|kk| element(&a, row * k + kk) * element(&b, kk * n + col));
                    products.fold(0.0f32, |acc, p| acc + p).to_bits()
                })
                .collect();
            for (variant, tile) in [
                (&MATMUL_NAIVE, MATMUL_CUBE),
                (&MATMUL_4X4, MATMUL_4X4_TILE),
                (&MATMUL_TILED16, MATMUL_CUBE),
            ] {
                let c = matrix(m * n, 0.0);
                let views = [CpuBuffer::new(&a), CpuBuffer::new(&b), CpuBuffer::new(&c)];
                let scalars = [m as u32, n as u32, k as u32];
                let io = KernelIo::new(&views, &scalars, ExecutionMode::Checked);
                let cube_count = [(n as u32).div_ceil(tile), (m as u32).div_ceil(tile), 1];
                crate::library::run_every_cube(variant, cube_count, &io);
                let got: Vec<u32> = c.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                assert_eq!(got, expected, "{} with {a_len} and {b_len}", variant.name);
            }
        }
    }
}

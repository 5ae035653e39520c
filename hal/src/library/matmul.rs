//! Matmul tilings, the candidates of the `matmul` tunable set: `c = a · b` for row-major `f32`
//! matrices `a` (m×k), `b` (k×n), `c` (m×n) — buffers: a, b, c; scalars: m, n, k. Every variant
//! runs 16×16 units per cube: one output element per unit, 4×4 per unit (a cube covers 64×64),
//! or one per unit with 16×16 tiles of `a` and `b` staged in workgroup memory. Elements outside
//! the matrices read as zero and are never written.
//!
//! Every unit adds its products `acc + a * b` in `k` order, two roundings each. The CPU sources
//! are hand-written (`matmul_cpu`'s block walk checks a row of `a` and a column of `b` once
//! instead of at every load) and add the same products in the same order
//! (`every_variant_sums_in_order_and_reads_zero_past_a_short_binding`). The GPU sources are the
//! `#[kernel]`'s where its code is within 1.1x of the hand-written time (`benches/kernels.rs`,
//! H100 and H200 hosts, 2026-12-06; `docs/benchmarks.md`), else hand-written, in the backend
//! (`Kernels::library_source`, `backends/{wgpu,cuda}/src/library/`):
//! - [`MATMUL_NAIVE`]: generated everywhere (CUDA 0.85x, NVIDIA Vulkan 1.09x the hand-written).
//! - [`MATMUL_4X4`]: generated WGSL (0.05x the hand-written WGSL's time, whose accumulator array
//!   the driver kept in memory), hand-written CUDA C (the generated took 1.51–1.57x: its 32-bit
//!   indices cost an address computation per load where the hand-written's 64-bit ones fold
//!   into offsets).
//! - [`MATMUL_TILED16`]: hand-written WGSL and CUDA C (the generated took 1.22–1.27x on NVIDIA
//!   Vulkan and 1.32–1.48x on CUDA, the bounds checks of its shared-memory loads and its
//!   unfused products in the inner loop).
//!   Its hand-written WGSL may be contracted into fused multiply-adds by a driver, so on wgpu it
//!   need not give the CPU's bits.

use crate::kernel::{BufferIo, CpuSource, CubeContext, KernelDef, KernelIo, Param, Signature};
use std::sync::atomic::{AtomicU32, Ordering};

/// Units per cube side of every matmul variant.
pub const MATMUL_CUBE: u32 = 16;
/// Output elements per cube side of [`MATMUL_4X4`].
pub const MATMUL_4X4_TILE: u32 = 4 * MATMUL_CUBE;

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

/// The CPU source of [`MATMUL_NAIVE`] and [`MATMUL_TILED16`]: a 16×16 block per cube.
fn matmul_cpu(ctx: &CubeContext, io: &KernelIo<'_>) {
    multiply_block(ctx, io, MATMUL_CUBE as usize);
}

/// The CPU source of [`MATMUL_4X4`]: a 64×64 block per cube.
fn matmul_4x4_cpu(ctx: &CubeContext, io: &KernelIo<'_>) {
    multiply_block(ctx, io, MATMUL_4X4_TILE as usize);
}

mod generated {
    use crate::kernel;

    /// One output element per unit; launch `covering_2d(n, m, 16)` cubes.
    #[kernel(
        crate = crate,
        id = "gpuworld.matmul_naive",
        cube_dim = [16, 16, 1],
        cpu = crate::library::matmul::matmul_cpu
    )]
    pub fn matmul_naive(a: &[f32], b: &[f32], c: &mut [f32], m: u32, n: u32, k: u32) {
        let row = cube_y() * 16 + unit_y();
        let col = cube_x() * 16 + unit_x();
        if row < m && col < n {
            // The indices stepped, not multiplied (`row * k + kk`, `kk * n + col`).
            let mut acc = 0.0;
            let mut ia = row * k;
            let mut ib = col;
            for _kk in 0..k {
                acc += a[ia] * b[ib];
                ia += 1;
                ib += n;
            }
            c[row * n + col] = acc;
        }
    }

    /// [`MATMUL_4X4`](crate::library::matmul::MATMUL_4X4)'s source, whose CPU source and WGSL it lists: unit `(x, y)` owns
    /// rows `y, y+16, y+32, y+48` and the same columns of its cube's 64×64 block, so neighbouring
    /// units read neighbouring addresses; `acc_r` holds row `r`'s four outputs.
    #[kernel(
        crate = crate,
        id = "gpuworld.matmul_4x4.generated",
        cube_dim = [16, 16, 1],
        cpu = crate::library::matmul::matmul_4x4_cpu
    )]
    pub fn matmul_4x4(a: &[f32], b: &[f32], c: &mut [f32], m: u32, n: u32, k: u32) {
        let row0 = cube_y() * 64 + unit_y();
        let col0 = cube_x() * 64 + unit_x();
        let mut acc0 = vec4(0.0, 0.0, 0.0, 0.0);
        let mut acc1 = vec4(0.0, 0.0, 0.0, 0.0);
        let mut acc2 = vec4(0.0, 0.0, 0.0, 0.0);
        let mut acc3 = vec4(0.0, 0.0, 0.0, 0.0);
        for kk in 0..k {
            let a0 = if row0 < m { a[row0 * k + kk] } else { 0.0 };
            let a1 = if row0 + 16 < m {
                a[(row0 + 16) * k + kk]
            } else {
                0.0
            };
            let a2 = if row0 + 32 < m {
                a[(row0 + 32) * k + kk]
            } else {
                0.0
            };
            let a3 = if row0 + 48 < m {
                a[(row0 + 48) * k + kk]
            } else {
                0.0
            };
            let b0 = if col0 < n { b[kk * n + col0] } else { 0.0 };
            let b1 = if col0 + 16 < n {
                b[kk * n + col0 + 16]
            } else {
                0.0
            };
            let b2 = if col0 + 32 < n {
                b[kk * n + col0 + 32]
            } else {
                0.0
            };
            let b3 = if col0 + 48 < n {
                b[kk * n + col0 + 48]
            } else {
                0.0
            };
            let bv = vec4(b0, b1, b2, b3);
            acc0 += bv * a0;
            acc1 += bv * a1;
            acc2 += bv * a2;
            acc3 += bv * a3;
        }
        for r in 0..4 {
            let row = row0 + r * 16;
            let v = if r == 0 {
                acc0
            } else {
                if r == 1 {
                    acc1
                } else {
                    if r == 2 { acc2 } else { acc3 }
                }
            };
            if row < m {
                let i = row * n + col0;
                if col0 < n {
                    c[i] = v.x;
                }
                if col0 + 16 < n {
                    c[i + 16] = v.y;
                }
                if col0 + 32 < n {
                    c[i + 32] = v.z;
                }
                if col0 + 48 < n {
                    c[i + 48] = v.w;
                }
            }
        }
    }
}

pub use generated::matmul_naive as MATMUL_NAIVE;

/// A 4×4 block of outputs per unit; launch `covering_2d(n, m, 64)` cubes. Its CPU source and
/// WGSL are the `#[kernel]`'s, its CUDA C hand-written (the cuda backend's library).
pub static MATMUL_4X4: KernelDef = KernelDef {
    id: "gpuworld.matmul_4x4",
    name: "matmul_4x4",
    signature: generated::matmul_4x4.signature,
    // The macro lists its CPU source, WGSL and CUDA C in this order
    // (`the_4x4_lists_the_generated_cpu_source_and_wgsl_and_no_cuda` checks it).
    sources: &[
        generated::matmul_4x4.sources[0],
        generated::matmul_4x4.sources[1],
    ],
};

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory; launch
/// `covering_2d(n, m, 16)` cubes. Its WGSL and CUDA C are hand-written (the backends' library).
pub static MATMUL_TILED16: KernelDef = KernelDef {
    id: "gpuworld.matmul_tiled16",
    name: "matmul_tiled16",
    signature: SIGNATURE,
    sources: &[&CpuSource(matmul_cpu)],
};

/// What [`MATMUL_TILED16`] binds (as the generated variants): `a`, `b`, `c` and the dimensions.
const SIGNATURE: Signature = Signature {
    buffers: &[
        Param::f32("a").read_only(),
        Param::f32("b").read_only(),
        Param::f32("c"),
    ],
    scalars: &[Param::u32("m"), Param::u32("n"), Param::u32("k")],
    cube_dim: [MATMUL_CUBE, MATMUL_CUBE, 1],
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
                crate::kernel::run_every_cube(variant, cube_count, &io);
                let got: Vec<u32> = c.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                assert_eq!(got, expected, "{} with {a_len} and {b_len}", variant.name);
            }
        }
    }

    #[test]
    fn the_4x4_lists_the_generated_cpu_source_and_wgsl_and_no_cuda() {
        use crate::kernel::{CudaSource, WgslSource};
        let generated = &generated::matmul_4x4;
        // Its CPU source's sums: `every_variant_sums_in_order_and_reads_zero_past_a_short_binding`.
        assert!(MATMUL_4X4.source::<CpuSource>().is_some());
        let text = |kernel: &KernelDef| kernel.source::<WgslSource>().map(|source| source.0);
        assert_eq!(text(&MATMUL_4X4), text(generated));
        assert!(text(generated).is_some());
        assert!(MATMUL_4X4.source::<CudaSource>().is_none());
    }
}

//! Matmul tilings, the candidates of the `matmul` tunable set: `c = a · b` for row-major `f32`
//! matrices `a` (m×k), `b` (k×n), `c` (m×n) — buffers: a, b, c; scalars: m, n, k. Every variant
//! runs 16×16 units per cube: one output element per unit, 4×4 per unit (a cube covers 64×64),
//! or one per unit with 16×16 tiles of `a` and `b` staged in workgroup memory. Elements outside
//! the matrices read as zero and are never written.

use crate::kernel::{CpuSource, CubeContext, KernelDef, KernelIo, Param, Signature};

/// Units per cube side of every matmul variant.
pub const MATMUL_CUBE: u32 = 16;
/// Output elements per cube side of [`MATMUL_4X4`].
pub const MATMUL_4X4_TILE: u32 = 4 * MATMUL_CUBE;

/// What every variant binds: `a`, `b`, `c` and the dimensions.
const SIGNATURE: Signature = Signature {
    buffers: &[Param::f32("a"), Param::f32("b"), Param::f32("c")],
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

/// `c[row][col]`, summing over `k` in blocks of `block` (the GPU's tile order).
fn dot(io: &KernelIo<'_>, row: usize, col: usize, n: usize, k: usize, block: usize) -> f32 {
    let mut acc = 0.0f32;
    for k0 in (0..k).step_by(block.max(1)) {
        for kk in k0..(k0 + block).min(k) {
            acc += io.load_f32(0, row * k + kk) * io.load_f32(1, kk * n + col);
        }
    }
    acc
}

/// Computes the `tile x tile` output block of this cube, one element at a time.
fn multiply_block(ctx: &CubeContext, io: &KernelIo<'_>, tile: usize, block: usize) {
    let (m, n, k) = dims(io);
    let row0 = ctx.cube_pos[1] as usize * tile;
    let col0 = ctx.cube_pos[0] as usize * tile;
    for row in row0..(row0 + tile).min(m) {
        for col in col0..(col0 + tile).min(n) {
            io.store_f32(2, row * n + col, dot(io, row, col, n, k, block));
        }
    }
}

/// One output element per unit; launch `covering_2d(n, m, 16)` cubes.
pub static MATMUL_NAIVE: KernelDef = KernelDef {
    id: "gpuworld.matmul_naive",
    name: "matmul_naive",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_CUBE as usize, usize::MAX)
    })],
};

/// A 4×4 block of outputs per unit; launch `covering_2d(n, m, 64)` cubes.
pub static MATMUL_4X4: KernelDef = KernelDef {
    id: "gpuworld.matmul_4x4",
    name: "matmul_4x4",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_4X4_TILE as usize, usize::MAX)
    })],
};

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory; launch
/// `covering_2d(n, m, 16)` cubes.
pub static MATMUL_TILED16: KernelDef = KernelDef {
    id: "gpuworld.matmul_tiled16",
    name: "matmul_tiled16",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        multiply_block(ctx, io, MATMUL_CUBE as usize, MATMUL_CUBE as usize);
    })],
};

/// Every matmul variant.
pub fn all() -> [&'static KernelDef; 3] {
    [&MATMUL_NAIVE, &MATMUL_4X4, &MATMUL_TILED16]
}

//! Matmul tilings, the candidates of the `matmul` tunable set: `c = a · b` for row-major `f32`
//! matrices `a` (m×k), `b` (k×n), `c` (m×n) — buffers: a, b, c; scalars: m, n, k. Every variant
//! runs 16×16 units per cube: one output element per unit, 4×4 per unit (a cube covers 64×64),
//! or one per unit with 16×16 tiles of `a` and `b` staged in workgroup memory. Elements outside
//! the matrices read as zero and are never written.

use crate::kernel::{CubeContext, KernelDef, KernelIo};

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
    cube_dim: [MATMUL_CUBE, MATMUL_CUBE, 1],
    buffers: 3,
    scalars: 3,
    cpu: Some(|ctx, io| multiply_block(ctx, io, MATMUL_CUBE as usize, usize::MAX)),
    wgsl: Some(WGSL_NAIVE),
    cuda: Some(CUDA_NAIVE),
};

/// A 4×4 block of outputs per unit; launch `covering_2d(n, m, 64)` cubes.
pub static MATMUL_4X4: KernelDef = KernelDef {
    id: "gpuworld.matmul_4x4",
    name: "matmul_4x4",
    cube_dim: [MATMUL_CUBE, MATMUL_CUBE, 1],
    buffers: 3,
    scalars: 3,
    cpu: Some(|ctx, io| multiply_block(ctx, io, MATMUL_4X4_TILE as usize, usize::MAX)),
    wgsl: Some(WGSL_4X4),
    cuda: Some(CUDA_4X4),
};

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory; launch
/// `covering_2d(n, m, 16)` cubes.
pub static MATMUL_TILED16: KernelDef = KernelDef {
    id: "gpuworld.matmul_tiled16",
    name: "matmul_tiled16",
    cube_dim: [MATMUL_CUBE, MATMUL_CUBE, 1],
    buffers: 3,
    scalars: 3,
    cpu: Some(|ctx, io| {
        multiply_block(ctx, io, MATMUL_CUBE as usize, MATMUL_CUBE as usize);
    }),
    wgsl: Some(WGSL_TILED16),
    cuda: Some(CUDA_TILED16),
};

/// Every matmul variant.
pub fn all() -> [&'static KernelDef; 3] {
    [&MATMUL_NAIVE, &MATMUL_4X4, &MATMUL_TILED16]
}

/// WGSL of [`MATMUL_NAIVE`].
pub const WGSL_NAIVE: &str = "struct Scalars { m: u32, n: u32, k: u32, pad0: u32 }

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> scalars: Scalars;

fn load_a(row: u32, col: u32) -> f32 {
    let i = row * scalars.k + col;
    if row < scalars.m && col < scalars.k && i < arrayLength(&a) {
        return a[i];
    }
    return 0.0;
}

fn load_b(row: u32, col: u32) -> f32 {
    let i = row * scalars.n + col;
    if row < scalars.k && col < scalars.n && i < arrayLength(&b) {
        return b[i];
    }
    return 0.0;
}

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
    let row = cube.y * 16u + unit.y;
    let col = cube.x * 16u + unit.x;
    if row >= scalars.m || col >= scalars.n {
        return;
    }
    var acc = 0.0;
    for (var kk = 0u; kk < scalars.k; kk = kk + 1u) {
        acc = acc + load_a(row, kk) * load_b(kk, col);
    }
    let i = row * scalars.n + col;
    if i < arrayLength(&c) {
        c[i] = acc;
    }
}
";

/// WGSL of [`MATMUL_4X4`].
pub const WGSL_4X4: &str = "struct Scalars { m: u32, n: u32, k: u32, pad0: u32 }

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> scalars: Scalars;

fn load_a(row: u32, col: u32) -> f32 {
    let i = row * scalars.k + col;
    if row < scalars.m && col < scalars.k && i < arrayLength(&a) {
        return a[i];
    }
    return 0.0;
}

fn load_b(row: u32, col: u32) -> f32 {
    let i = row * scalars.n + col;
    if row < scalars.k && col < scalars.n && i < arrayLength(&b) {
        return b[i];
    }
    return 0.0;
}

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
    // Unit (x, y) owns rows y, y+16, y+32, y+48 and the same columns of its cube's 64x64 block,
    // so neighbouring units read neighbouring addresses.
    let row0 = cube.y * 64u + unit.y;
    let col0 = cube.x * 64u + unit.x;
    var acc: array<f32, 16>;
    for (var t = 0u; t < 16u; t = t + 1u) {
        acc[t] = 0.0;
    }
    for (var kk = 0u; kk < scalars.k; kk = kk + 1u) {
        var av: array<f32, 4>;
        var bv: array<f32, 4>;
        for (var r = 0u; r < 4u; r = r + 1u) {
            av[r] = load_a(row0 + r * 16u, kk);
            bv[r] = load_b(kk, col0 + r * 16u);
        }
        for (var r = 0u; r < 4u; r = r + 1u) {
            for (var s = 0u; s < 4u; s = s + 1u) {
                acc[r * 4u + s] = acc[r * 4u + s] + av[r] * bv[s];
            }
        }
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        for (var s = 0u; s < 4u; s = s + 1u) {
            let row = row0 + r * 16u;
            let col = col0 + s * 16u;
            let i = row * scalars.n + col;
            if row < scalars.m && col < scalars.n && i < arrayLength(&c) {
                c[i] = acc[r * 4u + s];
            }
        }
    }
}
";

/// WGSL of [`MATMUL_TILED16`].
pub const WGSL_TILED16: &str = "struct Scalars { m: u32, n: u32, k: u32, pad0: u32 }

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> scalars: Scalars;

var<workgroup> tile_a: array<f32, 256>;
var<workgroup> tile_b: array<f32, 256>;

fn load_a(row: u32, col: u32) -> f32 {
    let i = row * scalars.k + col;
    if row < scalars.m && col < scalars.k && i < arrayLength(&a) {
        return a[i];
    }
    return 0.0;
}

fn load_b(row: u32, col: u32) -> f32 {
    let i = row * scalars.n + col;
    if row < scalars.k && col < scalars.n && i < arrayLength(&b) {
        return b[i];
    }
    return 0.0;
}

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
    let row = cube.y * 16u + unit.y;
    let col = cube.x * 16u + unit.x;
    let tiles = (scalars.k + 15u) / 16u;
    var acc = 0.0;
    for (var t = 0u; t < tiles; t = t + 1u) {
        tile_a[unit.y * 16u + unit.x] = load_a(row, t * 16u + unit.x);
        tile_b[unit.y * 16u + unit.x] = load_b(t * 16u + unit.y, col);
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            acc = acc + tile_a[unit.y * 16u + kk] * tile_b[kk * 16u + unit.x];
        }
        workgroupBarrier();
    }
    let i = row * scalars.n + col;
    if row < scalars.m && col < scalars.n && i < arrayLength(&c) {
        c[i] = acc;
    }
}
";

/// CUDA C of [`MATMUL_NAIVE`] (convention at the top of `library/cuda.rs`).
pub const CUDA_NAIVE: &str = r#"extern "C" __global__ void matmul_naive(float* b0, unsigned int n0, float* b1, unsigned int n1, float* b2, unsigned int n2, unsigned int s0, unsigned int s1, unsigned int s2 GW_COUNT_PARAM) {
    const unsigned long long m = s0, n = s1, k = s2;
    GW_FOR_EACH_CUBE {
        const unsigned long long row = GW_CUBE_Y * 16ull + threadIdx.y;
        const unsigned long long col = GW_CUBE_X * 16ull + threadIdx.x;
        if (row >= m || col >= n) continue;
        float acc = 0.0f;
        for (unsigned long long kk = 0; kk < k; ++kk) {
            const unsigned long long ia = row * k + kk, ib = kk * n + col;
            const float av = GW_IN_BOUNDS(ia, n0) ? b0[ia] : 0.0f;
            const float bv = GW_IN_BOUNDS(ib, n1) ? b1[ib] : 0.0f;
            acc += av * bv;
        }
        const unsigned long long ic = row * n + col;
        if (GW_IN_BOUNDS(ic, n2)) b2[ic] = acc;
    }
}
"#;

/// CUDA C of [`MATMUL_4X4`].
pub const CUDA_4X4: &str = r#"extern "C" __global__ void matmul_4x4(float* b0, unsigned int n0, float* b1, unsigned int n1, float* b2, unsigned int n2, unsigned int s0, unsigned int s1, unsigned int s2 GW_COUNT_PARAM) {
    const unsigned long long m = s0, n = s1, k = s2;
    GW_FOR_EACH_CUBE {
        const unsigned long long row0 = GW_CUBE_Y * 64ull + threadIdx.y;
        const unsigned long long col0 = GW_CUBE_X * 64ull + threadIdx.x;
        float acc[4][4] = {{0.0f}};
        for (unsigned long long kk = 0; kk < k; ++kk) {
            float av[4], bv[4];
            for (int r = 0; r < 4; ++r) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + r * 16ull;
                const unsigned long long ia = row * k + kk, ib = kk * n + col;
                av[r] = row < m && GW_IN_BOUNDS(ia, n0) ? b0[ia] : 0.0f;
                bv[r] = col < n && GW_IN_BOUNDS(ib, n1) ? b1[ib] : 0.0f;
            }
            for (int r = 0; r < 4; ++r)
                for (int q = 0; q < 4; ++q) acc[r][q] += av[r] * bv[q];
        }
        for (int r = 0; r < 4; ++r)
            for (int q = 0; q < 4; ++q) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + q * 16ull;
                const unsigned long long ic = row * n + col;
                if (row < m && col < n && GW_IN_BOUNDS(ic, n2)) b2[ic] = acc[r][q];
            }
    }
}
"#;

/// CUDA C of [`MATMUL_TILED16`].
pub const CUDA_TILED16: &str = r#"extern "C" __global__ void matmul_tiled16(float* b0, unsigned int n0, float* b1, unsigned int n1, float* b2, unsigned int n2, unsigned int s0, unsigned int s1, unsigned int s2 GW_COUNT_PARAM) {
    const unsigned long long m = s0, n = s1, k = s2;
    __shared__ float tile_a[16][16];
    __shared__ float tile_b[16][16];
    GW_FOR_EACH_CUBE {
        const unsigned long long row = GW_CUBE_Y * 16ull + threadIdx.y;
        const unsigned long long col = GW_CUBE_X * 16ull + threadIdx.x;
        float acc = 0.0f;
        for (unsigned long long t = 0; t < (k + 15) / 16; ++t) {
            const unsigned long long ka = t * 16 + threadIdx.x, kb = t * 16 + threadIdx.y;
            const unsigned long long ia = row * k + ka, ib = kb * n + col;
            tile_a[threadIdx.y][threadIdx.x] = row < m && ka < k && GW_IN_BOUNDS(ia, n0) ? b0[ia] : 0.0f;
            tile_b[threadIdx.y][threadIdx.x] = kb < k && col < n && GW_IN_BOUNDS(ib, n1) ? b1[ib] : 0.0f;
            __syncthreads();
            for (int kk = 0; kk < 16; ++kk) acc += tile_a[threadIdx.y][kk] * tile_b[kk][threadIdx.x];
            __syncthreads();
        }
        const unsigned long long ic = row * n + col;
        if (row < m && col < n && GW_IN_BOUNDS(ic, n2)) b2[ic] = acc;
    }
}
"#;

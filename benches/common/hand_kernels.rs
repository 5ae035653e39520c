//! The hand-written WGSL and CUDA C the library's reduce variants and matmul tilings had until
//! 2026-12-06 (when they became `#[kernel]` sources, `gpuworld::library`), and the hand-written
//! sources of `examples/bevy_particles.rs`'s integrator: kept here, verbatim, as the reference
//! `benches/kernels.rs` times the generated code against. Each is a `KernelDef` with the
//! library kernel's signature, so the same bindings launch both.

#![allow(dead_code)]

use gpuworld::kernel::{
    CpuSource, CubeContext, CudaSource, KernelDef, KernelIo, Param, Signature, WgslSource,
};
use std::sync::atomic::Ordering;

/// The reduce variants' signature: the input, the partial sums, the number of elements to sum.
const REDUCE: Signature = Signature {
    buffers: &[Param::f32("input").read_only(), Param::f32("output")],
    scalars: &[Param::u32("n")],
    cube_dim: [256, 1, 1],
};

/// The matmul tilings' signature: `a`, `b`, `c` and the dimensions.
const MATMUL: Signature = Signature {
    buffers: &[
        Param::f32("a").read_only(),
        Param::f32("b").read_only(),
        Param::f32("c"),
    ],
    scalars: &[Param::u32("m"), Param::u32("n"), Param::u32("k")],
    cube_dim: [16, 16, 1],
};

/// A hand-written kernel of the library: its id, name, signature, WGSL and CUDA C.
macro_rules! hand_kernel {
    ($static:ident, $name:literal, $signature:expr, $wgsl:expr, $cuda:expr) => {
        pub static $static: KernelDef = KernelDef {
            id: concat!("bench.hand.", $name),
            name: $name,
            signature: $signature,
            sources: &[&$wgsl, &$cuda],
        };
    };
}

/// The reduce variants' CPU sources as the library had them: a cube's share summed in a plain
/// loop (no tree), so on the cpu backend they gave other bits than on a GPU.
pub static REDUCE_SUM_TREE4: KernelDef = KernelDef {
    id: "bench.hand.reduce_sum_tree4",
    name: "reduce_sum_tree4",
    signature: REDUCE,
    sources: &[
        &CpuSource(|cube, io| sum_contiguous(cube, io, 1024)),
        &WGSL_TREE4,
        &CUDA_TREE4,
    ],
};

/// See [`REDUCE_SUM_TREE4`].
pub static REDUCE_SUM_STRIDED: KernelDef = KernelDef {
    id: "bench.hand.reduce_sum_strided",
    name: "reduce_sum_strided",
    signature: REDUCE,
    sources: &[&CpuSource(sum_strided), &WGSL_STRIDED, &CUDA_STRIDED],
};

/// The number of elements a launch may read: the scalar `n`, clipped to the input binding.
fn element_count(io: &KernelIo<'_>) -> usize {
    (io.scalar_u32(0) as usize).min(io.len32(0))
}

/// Sums `per_cube` contiguous elements starting at this cube's first one.
fn sum_contiguous(ctx: &CubeContext, io: &KernelIo<'_>, per_cube: u64) {
    let n = element_count(io) as u64;
    let cube = ctx.cube_index();
    let start = (cube * per_cube).min(n);
    let end = (start + per_cube).min(n);
    let words = io
        .buffer(0)
        .words(start as usize..end as usize)
        .unwrap_or(&[]);
    let sum: f32 = words
        .iter()
        .map(|word| f32::from_bits(word.load(Ordering::Relaxed)))
        .sum();
    io.store_f32(1, cube as usize, sum);
}

/// The grid-strided sum of one cube's units.
fn sum_strided(ctx: &CubeContext, io: &KernelIo<'_>) {
    let n = element_count(io);
    let units = ctx.units() as usize;
    let total = ctx
        .cube_count
        .iter()
        .map(|&c| c as usize)
        .product::<usize>()
        * units;
    let first = ctx.first_unit_1d() as usize;
    let input = io.buffer(0);
    let mut sum = 0.0f32;
    for unit in first..first + units {
        sum += (unit..n)
            .step_by(total.max(1))
            .map(|i| input.load_f32(i))
            .sum::<f32>();
    }
    io.store_f32(1, ctx.cube_index() as usize, sum);
}

hand_kernel!(MATMUL_NAIVE, "matmul_naive", MATMUL, WGSL_NAIVE, CUDA_NAIVE);
hand_kernel!(
    MATMUL_4X4,
    "matmul_4x4",
    MATMUL,
    WGSL_FOUR_BY_FOUR,
    CUDA_FOUR_BY_FOUR
);
hand_kernel!(
    MATMUL_TILED16,
    "matmul_tiled16",
    MATMUL,
    WGSL_TILED16,
    CUDA_TILED16
);

// ---- WGSL (backends/wgpu/src/library/, as of ab106f3) ----

/// The start of a 1-D kernel's entry point: `i`, the launch-wide index of this unit (cubes
/// flattened as `CubeContext::cube_index` does), 256 units per cube.
macro_rules! linear_main {
    () => {
        "@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let c = cube.x + count.x * (cube.y + count.y * cube.z);
    let i = c * 256u + unit;
"
    };
}

/// The start of a 2-D kernel's entry point: 16×16 units per cube, `cube` and `unit` its ids.
macro_rules! tile_main {
    () => {
        "@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
"
    };
}

/// The tree every variant ends with: sums `value` over the cube's 256 units and unit 0 writes
/// the total to `output[c]`. Call it from uniform control flow (it holds barriers).
macro_rules! tree_sum {
    () => {
        "var<workgroup> partial: array<f32, 256>;

fn sum_cube_into_output(c: u32, unit: u32, value: f32) {
    partial[unit] = value;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if unit < stride {
            partial[unit] = partial[unit] + partial[unit + stride];
        }
        workgroupBarrier();
    }
    if unit == 0u && c < arrayLength(&output) {
        output[c] = partial[0];
    }
}

"
    };
}

/// Four elements per unit, 1024 per cube.
const WGSL_TREE4: WgslSource = WgslSource(concat!(
    tree_sum!(),
    linear_main!(),
    "    let n = min(scalars.n, arrayLength(&input));
    var value = 0.0;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let e = c * 1024u + j * 256u + unit;
        if e < n {
            value = value + input[e];
        }
    }
    sum_cube_into_output(c, unit, value);
}
"
));

/// Elements `i, i + T, ...` per unit, `T` the launch's units.
const WGSL_STRIDED: WgslSource = WgslSource(concat!(
    tree_sum!(),
    linear_main!(),
    "    let n = min(scalars.n, arrayLength(&input));
    let total = count.x * count.y * count.z * 256u;
    var value = 0.0;
    for (var e = i; e < n; e = e + total) {
        value = value + input[e];
    }
    sum_cube_into_output(c, unit, value);
}
"
));

/// `a[row][col]` and `b[row][col]`, zero outside the matrices and the bindings.
macro_rules! loads {
    () => {
        "fn load_a(row: u32, col: u32) -> f32 {
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

"
    };
}

/// One output element per unit.
const WGSL_NAIVE: WgslSource = WgslSource(concat!(
    loads!(),
    tile_main!(),
    "    let row = cube.y * 16u + unit.y;
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
"
));

/// A 4×4 block of outputs per unit, 64×64 per cube.
const WGSL_FOUR_BY_FOUR: WgslSource = WgslSource(concat!(
    loads!(),
    tile_main!(),
    "    // Unit (x, y) owns rows y, y+16, y+32, y+48 and the same columns of its cube's 64x64 block,
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
"
));

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory.
const WGSL_TILED16: WgslSource = WgslSource(concat!(
    loads!(),
    "var<workgroup> tile_a: array<f32, 256>;
var<workgroup> tile_b: array<f32, 256>;

",
    tile_main!(),
    "    let row = cube.y * 16u + unit.y;
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
"
));

// ---- CUDA C (backends/cuda/src/library/, as of ab106f3) ----

/// A reduce-sum kernel named `$name`: `$body` sets `value`, this unit's sum of its share of
/// `input[..limit]` in cube `c`; then the block adds its 256 units' values up in a tree in
/// `partial` (shared memory) and unit 0 writes the total to `output[c]`.
macro_rules! reduce_kernel {
    ($name:literal, $body:literal) => {
        concat!(
            r#"
__device__ __forceinline__ void gw_sum_cube_into(float* partial, float* output,
                                                 unsigned int output_len, unsigned long long c,
                                                 unsigned int unit, float value) {
    partial[unit] = value;
    __syncthreads();
    for (unsigned int stride = 128u; stride > 0u; stride >>= 1) {
        if (unit < stride) partial[unit] += partial[unit + stride];
        __syncthreads();
    }
    if (unit == 0u && GW_IN_BOUNDS(c, output_len)) output[c] = partial[0];
    __syncthreads();
}

extern "C" __global__ void "#,
            $name,
            r#"(GW_PARAMS) {
    __shared__ float partial[256];
    const unsigned int unit = GW_UNIT;
    const unsigned long long limit = n < input_len ? n : input_len;
    GW_FOR_EACH_CUBE {
        const unsigned long long c = GW_CUBE_INDEX;
"#,
            $body,
            r#"        gw_sum_cube_into(partial, output, output_len, c, unit, value);
    }
}
"#
        )
    };
}

/// Four elements per unit, 1024 per cube.
const CUDA_TREE4: CudaSource = CudaSource(reduce_kernel!(
    "reduce_sum_tree4",
    "        float value = 0.0f;
        for (unsigned int j = 0u; j < 4u; ++j) {
            const unsigned long long i = c * 1024ull + j * 256ull + unit;
            if (i < limit) value += input[i];
        }
"
));

/// Elements `g, g + T, ...` per unit `g` of the launch, `T` its units.
const CUDA_STRIDED: CudaSource = CudaSource(reduce_kernel!(
    "reduce_sum_strided",
    "#if GPUWORLD_DYNAMIC
        const unsigned long long gw_total_units = gw_total * 256ull;
#else
        const unsigned long long gw_total_units = (unsigned long long)gridDim.x * gridDim.y * gridDim.z * 256ull;
#endif
        float value = 0.0f;
        for (unsigned long long i = c * 256ull + unit; i < limit; i += gw_total_units) value += input[i];
"
));

/// One output element per unit.
const CUDA_NAIVE: CudaSource = CudaSource(
    r#"
extern "C" __global__ void matmul_naive(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long row = GW_CUBE_Y * 16ull + threadIdx.y;
        const unsigned long long col = GW_CUBE_X * 16ull + threadIdx.x;
        if (row >= m || col >= n) continue;
        float acc = 0.0f;
        for (unsigned long long kk = 0; kk < k; ++kk) {
            const unsigned long long ia = row * k + kk, ib = kk * n + col;
            const float av = GW_IN_BOUNDS(ia, a_len) ? a[ia] : 0.0f;
            const float bv = GW_IN_BOUNDS(ib, b_len) ? b[ib] : 0.0f;
            acc += av * bv;
        }
        const unsigned long long ic = row * n + col;
        if (GW_IN_BOUNDS(ic, c_len)) c[ic] = acc;
    }
}
"#,
);

/// A 4×4 block of outputs per unit, 64×64 per cube.
const CUDA_FOUR_BY_FOUR: CudaSource = CudaSource(
    r#"
extern "C" __global__ void matmul_4x4(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long row0 = GW_CUBE_Y * 64ull + threadIdx.y;
        const unsigned long long col0 = GW_CUBE_X * 64ull + threadIdx.x;
        float acc[4][4] = {{0.0f}};
        for (unsigned long long kk = 0; kk < k; ++kk) {
            float av[4], bv[4];
            for (int r = 0; r < 4; ++r) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + r * 16ull;
                const unsigned long long ia = row * k + kk, ib = kk * n + col;
                av[r] = row < m && GW_IN_BOUNDS(ia, a_len) ? a[ia] : 0.0f;
                bv[r] = col < n && GW_IN_BOUNDS(ib, b_len) ? b[ib] : 0.0f;
            }
            for (int r = 0; r < 4; ++r)
                for (int q = 0; q < 4; ++q) acc[r][q] += av[r] * bv[q];
        }
        for (int r = 0; r < 4; ++r)
            for (int q = 0; q < 4; ++q) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + q * 16ull;
                const unsigned long long ic = row * n + col;
                if (row < m && col < n && GW_IN_BOUNDS(ic, c_len)) c[ic] = acc[r][q];
            }
    }
}
"#,
);

/// One output per unit, `a` and `b` staged through 16×16 tiles in shared memory.
const CUDA_TILED16: CudaSource = CudaSource(
    r#"
extern "C" __global__ void matmul_tiled16(GW_PARAMS) {
    __shared__ float tile_a[16][16];
    __shared__ float tile_b[16][16];
    GW_FOR_EACH_CUBE {
        const unsigned long long row = GW_CUBE_Y * 16ull + threadIdx.y;
        const unsigned long long col = GW_CUBE_X * 16ull + threadIdx.x;
        float acc = 0.0f;
        for (unsigned long long t = 0; t < ((unsigned long long)k + 15) / 16; ++t) {
            const unsigned long long ka = t * 16 + threadIdx.x, kb = t * 16 + threadIdx.y;
            const unsigned long long ia = row * k + ka, ib = kb * n + col;
            tile_a[threadIdx.y][threadIdx.x] = row < m && ka < k && GW_IN_BOUNDS(ia, a_len) ? a[ia] : 0.0f;
            tile_b[threadIdx.y][threadIdx.x] = kb < k && col < n && GW_IN_BOUNDS(ib, b_len) ? b[ib] : 0.0f;
            __syncthreads();
            for (int kk = 0; kk < 16; ++kk) acc += tile_a[threadIdx.y][kk] * tile_b[kk][threadIdx.x];
            __syncthreads();
        }
        const unsigned long long ic = row * n + col;
        if (row < m && col < n && GW_IN_BOUNDS(ic, c_len)) c[ic] = acc;
    }
}
"#,
);

// ---- examples/bevy_particles.rs's integrator (as of ab106f3) ----

/// One explicit Euler step under gravity in the unit box, bouncing off its walls: the WGSL and
/// CUDA C `examples/bevy_particles.rs` wrote by hand beside its CPU source.
pub static INTEGRATE: KernelDef = KernelDef {
    id: "bench.hand.integrate",
    name: "integrate",
    signature: Signature {
        buffers: &[
            Param::f32("px"),
            Param::f32("py"),
            Param::f32("vx"),
            Param::f32("vy"),
        ],
        scalars: &[Param::f32("dt"), Param::f32("gravity")],
        cube_dim: [256, 1, 1],
    },
    sources: &[
        &WgslSource(
            "fn bounce(p: f32, v: f32) -> vec2<f32> {
    if p < 0.0 { return vec2<f32>(-p, -v); }
    if p > 1.0 { return vec2<f32>(2.0 - p, -v); }
    return vec2<f32>(p, v);
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= arrayLength(&px) { return; }
    let vy0 = vy[i] - scalars.gravity * scalars.dt;
    let x = bounce(px[i] + vx[i] * scalars.dt, vx[i]);
    let y = bounce(py[i] + vy0 * scalars.dt, vy0);
    px[i] = x.x; vx[i] = x.y; py[i] = y.x; vy[i] = y.y;
}",
        ),
        &CudaSource(
            r#"
__device__ void bounce(float* p, float* v) {
    if (*p < 0.0f) { *p = -*p; *v = -*v; }
    else if (*p > 1.0f) { *p = 2.0f - *p; *v = -*v; }
}
extern "C" __global__ void integrate(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < px_len) {
            float x = px[i], y = py[i], u = vx[i], w = vy[i] - gravity * dt;
            x += u * dt; y += w * dt;
            bounce(&x, &u); bounce(&y, &w);
            px[i] = x; py[i] = y; vx[i] = u; vy[i] = w;
        }
    }
}
"#,
        ),
    ],
};

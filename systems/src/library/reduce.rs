//! Reduce-sum variants, the candidates of the `reduce_sum` tunable set. Each kernel sums part of
//! `input[..n]` per cube into `output[cube]` (buffers: input, output; scalars: n); the host
//! repeats passes over the partial sums until one value is left. They differ in how much each
//! cube covers: 256 elements (one per unit), 1024 (four per unit), or a grid-strided share of
//! the whole input (a fixed number of cubes, then one cube over their partials).
//! A GPU cube reduces its units' values with a tree in workgroup memory; a CPU cube runs its
//! units in a loop, so its "tree" is a plain sum (results agree within float rounding).

use crate::kernel::{CubeContext, KernelDef, KernelIo};

/// Units per cube of every reduce-sum variant.
pub const REDUCE_CUBE: u32 = 256;
/// Elements one cube of [`REDUCE_SUM_TREE`] sums.
pub const TREE_ELEMENTS_PER_CUBE: u32 = REDUCE_CUBE;
/// Elements one cube of [`REDUCE_SUM_TREE4`] sums.
pub const TREE4_ELEMENTS_PER_CUBE: u32 = 4 * REDUCE_CUBE;

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
    let sum: f32 = (start..end).map(|i| io.load_f32(0, i as usize)).sum();
    io.store_f32(1, cube as usize, sum);
}

/// One pass of a tree reduction: `output[c] = sum(input[c*256 .. c*256+256])`.
pub static REDUCE_SUM_TREE: KernelDef = KernelDef {
    id: "gpuworld.reduce_sum_tree",
    name: "reduce_sum_tree",
    cube_dim: [REDUCE_CUBE, 1, 1],
    buffers: 2,
    scalars: 1,
    cpu: Some(|ctx, io| sum_contiguous(ctx, io, u64::from(TREE_ELEMENTS_PER_CUBE))),
    wgsl: Some(WGSL_TREE),
    cuda: Some(CUDA_TREE),
};

/// One pass where each unit first sums four elements: `output[c] = sum(input[c*1024 ..][..1024])`.
pub static REDUCE_SUM_TREE4: KernelDef = KernelDef {
    id: "gpuworld.reduce_sum_tree4",
    name: "reduce_sum_tree4",
    cube_dim: [REDUCE_CUBE, 1, 1],
    buffers: 2,
    scalars: 1,
    cpu: Some(|ctx, io| sum_contiguous(ctx, io, u64::from(TREE4_ELEMENTS_PER_CUBE))),
    wgsl: Some(WGSL_TREE4),
    cuda: Some(CUDA_TREE4),
};

/// Grid-strided sum: unit `g` of the launch sums `input[g], input[g + T], ...` (`T` = all units
/// of the launch), and each cube writes its units' total to `output[c]`. With one cube it sums
/// everything.
pub static REDUCE_SUM_STRIDED: KernelDef = KernelDef {
    id: "gpuworld.reduce_sum_strided",
    name: "reduce_sum_strided",
    cube_dim: [REDUCE_CUBE, 1, 1],
    buffers: 2,
    scalars: 1,
    cpu: Some(|ctx, io| {
        let n = element_count(io);
        let units = ctx.units() as usize;
        let total = ctx
            .cube_count
            .iter()
            .map(|&c| c as usize)
            .product::<usize>()
            * units;
        let first = ctx.first_unit_1d() as usize;
        let mut sum = 0.0f32;
        for unit in first..first + units {
            sum += (unit..n)
                .step_by(total.max(1))
                .map(|i| io.load_f32(0, i))
                .sum::<f32>();
        }
        io.store_f32(1, ctx.cube_index() as usize, sum);
    }),
    wgsl: Some(WGSL_STRIDED),
    cuda: Some(CUDA_STRIDED),
};

/// Every reduce-sum variant.
pub fn all() -> [&'static KernelDef; 3] {
    [&REDUCE_SUM_TREE, &REDUCE_SUM_TREE4, &REDUCE_SUM_STRIDED]
}

/// WGSL of [`REDUCE_SUM_TREE`].
pub const WGSL_TREE: &str = "struct Scalars { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let c = cube.x + count.x * (cube.y + count.y * cube.z);
    let n = min(scalars.n, arrayLength(&input));
    let i = c * 256u + unit;
    var value = 0.0;
    if i < n {
        value = input[i];
    }
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
";

/// WGSL of [`REDUCE_SUM_TREE4`].
pub const WGSL_TREE4: &str = "struct Scalars { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let c = cube.x + count.x * (cube.y + count.y * cube.z);
    let n = min(scalars.n, arrayLength(&input));
    var value = 0.0;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let i = c * 1024u + j * 256u + unit;
        if i < n {
            value = value + input[i];
        }
    }
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
";

/// WGSL of [`REDUCE_SUM_STRIDED`].
pub const WGSL_STRIDED: &str = "struct Scalars { n: u32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let c = cube.x + count.x * (cube.y + count.y * cube.z);
    let n = min(scalars.n, arrayLength(&input));
    let total = count.x * count.y * count.z * 256u;
    var value = 0.0;
    for (var i = c * 256u + unit; i < n; i = i + total) {
        value = value + input[i];
    }
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
";

/// CUDA C of [`REDUCE_SUM_TREE`] (convention at the top of `library/cuda.rs`).
pub const CUDA_TREE: &str = r#"extern "C" __global__ void reduce_sum_tree(float* b0, unsigned int n0, float* b1, unsigned int n1, unsigned int s0 GW_COUNT_PARAM) {
    __shared__ float partial[256];
    const unsigned int unit = GW_UNIT;
    const unsigned long long limit = s0 < n0 ? s0 : n0;
    GW_FOR_EACH_CUBE {
        const unsigned long long c = GW_CUBE_INDEX;
        const unsigned long long i = c * 256ull + unit;
        const float value = i < limit ? b0[i] : 0.0f;
        partial[unit] = value;
        __syncthreads();
        for (unsigned int stride = 128u; stride > 0u; stride >>= 1) {
            if (unit < stride) partial[unit] += partial[unit + stride];
            __syncthreads();
        }
        if (unit == 0u && GW_IN_BOUNDS(c, n1)) b1[c] = partial[0];
        __syncthreads();
    }
}
"#;

/// CUDA C of [`REDUCE_SUM_TREE4`].
pub const CUDA_TREE4: &str = r#"extern "C" __global__ void reduce_sum_tree4(float* b0, unsigned int n0, float* b1, unsigned int n1, unsigned int s0 GW_COUNT_PARAM) {
    __shared__ float partial[256];
    const unsigned int unit = GW_UNIT;
    const unsigned long long limit = s0 < n0 ? s0 : n0;
    GW_FOR_EACH_CUBE {
        const unsigned long long c = GW_CUBE_INDEX;
        float value = 0.0f;
        for (unsigned int j = 0u; j < 4u; ++j) {
            const unsigned long long i = c * 1024ull + j * 256ull + unit;
            if (i < limit) value += b0[i];
        }
        partial[unit] = value;
        __syncthreads();
        for (unsigned int stride = 128u; stride > 0u; stride >>= 1) {
            if (unit < stride) partial[unit] += partial[unit + stride];
            __syncthreads();
        }
        if (unit == 0u && GW_IN_BOUNDS(c, n1)) b1[c] = partial[0];
        __syncthreads();
    }
}
"#;

/// CUDA C of [`REDUCE_SUM_STRIDED`].
pub const CUDA_STRIDED: &str = r#"extern "C" __global__ void reduce_sum_strided(float* b0, unsigned int n0, float* b1, unsigned int n1, unsigned int s0 GW_COUNT_PARAM) {
    __shared__ float partial[256];
    const unsigned int unit = GW_UNIT;
    const unsigned long long limit = s0 < n0 ? s0 : n0;
    GW_FOR_EACH_CUBE {
        const unsigned long long c = GW_CUBE_INDEX;
#if GPUWORLD_DYNAMIC
        const unsigned long long gw_total_units = gw_total * 256ull;
#else
        const unsigned long long gw_total_units = (unsigned long long)gridDim.x * gridDim.y * gridDim.z * 256ull;
#endif
        float value = 0.0f;
        for (unsigned long long i = c * 256ull + unit; i < limit; i += gw_total_units) value += b0[i];
        partial[unit] = value;
        __syncthreads();
        for (unsigned int stride = 128u; stride > 0u; stride >>= 1) {
            if (unit < stride) partial[unit] += partial[unit + stride];
            __syncthreads();
        }
        if (unit == 0u && GW_IN_BOUNDS(c, n1)) b1[c] = partial[0];
        __syncthreads();
    }
}
"#;

//! The CUDA C of the kernel library (`gpuworld_systems::library`), which the backend supplies
//! through `Backend::library_source`; parameters come from each kernel's signature (`GW_PARAMS`,
//! convention in `cuda_c`).

mod matmul;
mod reduce;

use crate::cuda_c::CudaSource;
use gpuworld_systems::kernel::KernelDef;
use gpuworld_systems::library::{self as lib, matmul as mm, reduce as rd};

/// A 1-D kernel named `$name`: `$body` runs for unit `i` of the launch (cubes flattened as
/// `CubeContext::cube_index` does), in every cube.
macro_rules! linear_kernel {
    ($name:literal, $body:literal) => {
        concat!(
            "\nextern \"C\" __global__ void ",
            $name,
            "(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
",
            $body,
            "    }
}
"
        )
    };
}

/// The library's kernels and their CUDA C.
pub(crate) static LIBRARY: [(&KernelDef, CudaSource); 12] = [
    (&lib::NOOP, NOOP),
    (&lib::FILL, FILL),
    (&lib::COPY, COPY),
    (&lib::ADD, ADD),
    (&lib::SCALE, SCALE),
    (&lib::STENCIL, STENCIL),
    (&rd::REDUCE_SUM_TREE, reduce::TREE),
    (&rd::REDUCE_SUM_TREE4, reduce::TREE4),
    (&rd::REDUCE_SUM_STRIDED, reduce::STRIDED),
    (&mm::MATMUL_NAIVE, matmul::NAIVE),
    (&mm::MATMUL_4X4, matmul::FOUR_BY_FOUR),
    (&mm::MATMUL_TILED16, matmul::TILED16),
];

const NOOP: CudaSource = CudaSource(
    r#"
extern "C" __global__ void noop(GW_PARAMS) {}
"#,
);

const FILL: CudaSource = CudaSource(linear_kernel!(
    "fill",
    "        if (i < out_len) out[i] = value;
"
));

const COPY: CudaSource = CudaSource(linear_kernel!(
    "copy",
    "        if (i < dst_len) dst[i] = GW_IN_BOUNDS(i, src_len) ? src[i] : 0u;
"
));

const ADD: CudaSource = CudaSource(linear_kernel!(
    "add",
    "        if (i < out_len) {
            const float av = GW_IN_BOUNDS(i, a_len) ? a[i] : 0.0f;
            const float bv = GW_IN_BOUNDS(i, b_len) ? b[i] : 0.0f;
            out[i] = av + bv;
        }
"
));

const SCALE: CudaSource = CudaSource(linear_kernel!(
    "scale",
    "        if (i < out_len) out[i] = (GW_IN_BOUNDS(i, x_len) ? x[i] : 0.0f) * factor;
"
));

const STENCIL: CudaSource = CudaSource(
    r#"
__device__ __forceinline__ float gw_load(const float* b, unsigned int n, unsigned long long i) {
    return GW_IN_BOUNDS(i, n) ? b[i] : 0.0f;
}

extern "C" __global__ void stencil2d(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long x = (unsigned long long)GW_CUBE_X * blockDim.x + threadIdx.x;
        const unsigned long long y = (unsigned long long)GW_CUBE_Y * blockDim.y + threadIdx.y;
        if (x >= width || y >= height) continue;
        const unsigned long long i = y * width + x;
        const float center = gw_load(u, u_len, i);
        const bool border = x == 0 || y == 0 || x + 1 == width || y + 1 == height;
        float value = center;
        if (!border) {
            const float sum = gw_load(u, u_len, i - 1) + gw_load(u, u_len, i + 1)
                + gw_load(u, u_len, i - width) + gw_load(u, u_len, i + width);
            value = center + alpha * (sum - 4.0f * center);
        }
        if (GW_IN_BOUNDS(i, out_len)) out[i] = value;
    }
}
"#,
);

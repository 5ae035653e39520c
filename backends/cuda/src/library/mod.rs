//! The CUDA C of the kernel library (`gpuworld_systems::library`), which the backend supplies
//! through `Backend::library_source`; parameters come from each kernel's signature (`GW_PARAMS`,
//! convention in `cuda_c`).

mod matmul;
mod reduce;

use crate::cuda_c::CudaSource;
use gpuworld_systems::kernel::KernelDef;
use gpuworld_systems::library::{self as lib, matmul as mm, reduce as rd};

/// The library's kernels and their CUDA C.
static LIBRARY: [(&KernelDef, CudaSource); 12] = [
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

/// The CUDA C of `kernel` if it is one of the library's (found by address, not by id).
pub(crate) fn source(kernel: &KernelDef) -> Option<&'static CudaSource> {
    LIBRARY
        .iter()
        .find(|(def, _)| std::ptr::eq(*def, kernel))
        .map(|(_, source)| source)
}

const NOOP: CudaSource = CudaSource(
    r#"
extern "C" __global__ void noop(GW_PARAMS) {}
"#,
);

const FILL: CudaSource = CudaSource(
    r#"
extern "C" __global__ void fill(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < out_len) out[i] = value;
    }
}
"#,
);

const COPY: CudaSource = CudaSource(
    r#"
extern "C" __global__ void copy(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < dst_len) dst[i] = GW_IN_BOUNDS(i, src_len) ? src[i] : 0u;
    }
}
"#,
);

const ADD: CudaSource = CudaSource(
    r#"
extern "C" __global__ void add(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < out_len) {
            const float av = GW_IN_BOUNDS(i, a_len) ? a[i] : 0.0f;
            const float bv = GW_IN_BOUNDS(i, b_len) ? b[i] : 0.0f;
            out[i] = av + bv;
        }
    }
}
"#,
);

const SCALE: CudaSource = CudaSource(
    r#"
extern "C" __global__ void scale(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < out_len) out[i] = (GW_IN_BOUNDS(i, x_len) ? x[i] : 0.0f) * factor;
    }
}
"#,
);

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

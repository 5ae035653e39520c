//! CUDA C sources of the kernel library, for the cuda backend. `None` marks a kernel the cuda
//! backend cannot run yet.
//!
//! # Convention
//! - A source defines one `extern "C" __global__` function named after the kernel's `name`.
//! - Parameters: for each buffer binding `i`, a pointer `float* b{i}` (or `unsigned int*`) and its
//!   length in 32-bit elements `unsigned int n{i}`; then the kernel's 32-bit scalars in order, as
//!   `unsigned int s{j}` (`__uint_as_float(s{j})` for an `f32`); then `GW_COUNT_PARAM` (or
//!   `GW_COUNT_PARAM_ONLY` for a kernel without parameters).
//! - One CUDA block is one cube (`blockDim` = `KernelDef::cube_dim`). The body sits inside
//!   `GW_FOR_EACH_CUBE { ... }` and reads its cube from `GW_CUBE_INDEX` (flattened as
//!   `CubeContext::cube_index`: `x + cx * (y + cy * z)`), `GW_CUBE_X`/`GW_CUBE_Y`/`GW_CUBE_Z`,
//!   and the first unit of a 1-D cube from `GW_FIRST_UNIT_1D`; leave a cube with `continue`,
//!   never `return` (a launch with a dynamic count runs several cubes per block).
//! - Every access is guarded with `GW_IN_BOUNDS(index, n{i})`: true in unchecked launches
//!   (compiled with `-DGPUWORLD_CHECKED=0`), a real check in checked ones (`-DGPUWORLD_CHECKED=1`),
//!   where a load out of bounds gives 0 and a store out of bounds is dropped, as on the CPU.
//! - The backend prepends [`PRELUDE`], which defines these macros. With a dynamic cube count
//!   (`-DGPUWORLD_DYNAMIC=1`), `GW_COUNT_PARAM` is a trailing pointer to the three `u32` of the
//!   count, and the backend launches a fixed grid whose blocks stride over the cubes.

/// Macros every source is compiled with; see the module's convention.
pub const PRELUDE: &str = r#"
#ifndef GPUWORLD_CHECKED
#define GPUWORLD_CHECKED 1
#endif
#ifndef GPUWORLD_DYNAMIC
#define GPUWORLD_DYNAMIC 0
#endif
#if GPUWORLD_CHECKED
#define GW_IN_BOUNDS(index, len) ((unsigned long long)(index) < (unsigned long long)(len))
#else
#define GW_IN_BOUNDS(index, len) true
#endif
#if GPUWORLD_DYNAMIC
#define GW_COUNT_PARAM , const unsigned int* gw_count
#define GW_COUNT_PARAM_ONLY const unsigned int* gw_count
#define GW_FOR_EACH_CUBE \
    const unsigned long long gw_cx = gw_count[0], gw_cy = gw_count[1]; \
    const unsigned long long gw_total = gw_cx * gw_cy * (unsigned long long)gw_count[2]; \
    for (unsigned long long gw_cube = blockIdx.x; gw_cube < gw_total; gw_cube += gridDim.x)
#else
#define GW_COUNT_PARAM
#define GW_COUNT_PARAM_ONLY
#define GW_FOR_EACH_CUBE \
    const unsigned long long gw_cx = gridDim.x, gw_cy = gridDim.y; \
    for (unsigned long long gw_cube = blockIdx.x + gw_cx * (blockIdx.y + gw_cy * blockIdx.z), \
         gw_once = 0; gw_once < 1; ++gw_once)
#endif
#define GW_CUBE_INDEX gw_cube
#define GW_CUBE_X ((unsigned int)(gw_cube % gw_cx))
#define GW_CUBE_Y ((unsigned int)((gw_cube / gw_cx) % gw_cy))
#define GW_CUBE_Z ((unsigned int)(gw_cube / (gw_cx * gw_cy)))
#define GW_UNITS ((unsigned long long)blockDim.x * blockDim.y * blockDim.z)
#define GW_UNIT (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define GW_FIRST_UNIT_1D (gw_cube * GW_UNITS)
"#;

/// Source of `noop`.
pub const NOOP: Option<&str> = Some(
    r#"
extern "C" __global__ void noop(GW_COUNT_PARAM_ONLY) {}
"#,
);

/// Source of `fill`.
pub const FILL: Option<&str> = Some(
    r#"
extern "C" __global__ void fill(float* b0, unsigned int n0, unsigned int s0 GW_COUNT_PARAM) {
    const float value = __uint_as_float(s0);
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < n0) b0[i] = value;
    }
}
"#,
);

/// Source of `copy`.
pub const COPY: Option<&str> = Some(
    r#"
extern "C" __global__ void copy(const unsigned int* b0, unsigned int n0,
                                unsigned int* b1, unsigned int n1 GW_COUNT_PARAM) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < n1) b1[i] = GW_IN_BOUNDS(i, n0) ? b0[i] : 0u;
    }
}
"#,
);

/// Source of `add`.
pub const ADD: Option<&str> = Some(
    r#"
extern "C" __global__ void add(const float* b0, unsigned int n0, const float* b1, unsigned int n1,
                               float* b2, unsigned int n2 GW_COUNT_PARAM) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < n2) {
            const float a = GW_IN_BOUNDS(i, n0) ? b0[i] : 0.0f;
            const float b = GW_IN_BOUNDS(i, n1) ? b1[i] : 0.0f;
            b2[i] = a + b;
        }
    }
}
"#,
);

/// Source of `scale`.
pub const SCALE: Option<&str> = Some(
    r#"
extern "C" __global__ void scale(const float* b0, unsigned int n0, float* b1, unsigned int n1,
                                 unsigned int s0 GW_COUNT_PARAM) {
    const float factor = __uint_as_float(s0);
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < n1) b1[i] = (GW_IN_BOUNDS(i, n0) ? b0[i] : 0.0f) * factor;
    }
}
"#,
);

/// Source of `stencil2d`.
pub const STENCIL: Option<&str> = Some(
    r#"
__device__ __forceinline__ float gw_load(const float* b, unsigned int n, unsigned long long i) {
    return GW_IN_BOUNDS(i, n) ? b[i] : 0.0f;
}

extern "C" __global__ void stencil2d(const float* b0, unsigned int n0, float* b1, unsigned int n1,
                                     unsigned int s0, unsigned int s1, unsigned int s2
                                     GW_COUNT_PARAM) {
    const unsigned long long width = s0, height = s1;
    const float alpha = __uint_as_float(s2);
    GW_FOR_EACH_CUBE {
        const unsigned long long x = (unsigned long long)GW_CUBE_X * blockDim.x + threadIdx.x;
        const unsigned long long y = (unsigned long long)GW_CUBE_Y * blockDim.y + threadIdx.y;
        if (x >= width || y >= height) continue;
        const unsigned long long i = y * width + x;
        const float u = gw_load(b0, n0, i);
        const bool border = x == 0 || y == 0 || x + 1 == width || y + 1 == height;
        float value = u;
        if (!border) {
            const float sum = gw_load(b0, n0, i - 1) + gw_load(b0, n0, i + 1)
                + gw_load(b0, n0, i - width) + gw_load(b0, n0, i + width);
            value = u + alpha * (sum - 4.0f * u);
        }
        if (GW_IN_BOUNDS(i, n1)) b1[i] = value;
    }
}
"#,
);

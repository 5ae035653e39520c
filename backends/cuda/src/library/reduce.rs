//! CUDA C of the reduce-sum variants (`gpuworld_hal::library::reduce`): each unit sums its
//! share of `input[..n]`, then the block adds its units' values up in one tree in shared memory,
//! shared by every variant.

use crate::cuda_c::CudaSource;

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
pub(super) const TREE4: CudaSource = CudaSource(reduce_kernel!(
    "reduce_sum_tree4",
    "        float value = 0.0f;
        for (unsigned int j = 0u; j < 4u; ++j) {
            const unsigned long long i = c * 1024ull + j * 256ull + unit;
            if (i < limit) value += input[i];
        }
"
));

/// Elements `g, g + T, ...` per unit `g` of the launch, `T` its units.
pub(super) const STRIDED: CudaSource = CudaSource(reduce_kernel!(
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

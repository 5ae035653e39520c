//! The CUDA C of the kernel library (`gpuworld_hal::library`), which the backend supplies
//! through `Backend::library_source`; parameters come from each kernel's signature (`GW_PARAMS`,
//! convention in `cuda_c`).

mod matmul;
mod reduce;

use crate::cuda_c::CudaSource;
use gpuworld_hal::kernel::KernelDef;
use gpuworld_hal::library::{self as lib, matmul as mm, reduce as rd};

/// The library's kernels and their CUDA C.
pub(crate) static LIBRARY: [(&KernelDef, CudaSource); 6] = [
    (&lib::NOOP, NOOP),
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

//! The CUDA C of the library kernels that stay hand-written (`gpuworld_hal::library`), which
//! the backend supplies through `Kernels::library_source`; parameters come from each kernel's
//! signature (`GW_PARAMS`, convention in `cuda_c`). Every other library kernel is a `#[kernel]`
//! source whose CUDA C the macro generates.

mod matmul;

use gpuworld_hal::kernel::{CudaSource, KernelDef};
use gpuworld_hal::library::matmul as mm;

/// The hand-written library kernels and their CUDA C.
pub(crate) static LIBRARY: [(&KernelDef, CudaSource); 2] = [
    (&mm::MATMUL_4X4, matmul::FOUR_BY_FOUR),
    (&mm::MATMUL_TILED16, matmul::TILED16),
];

/// The hand-written CUDA C of `kernel`, if [`LIBRARY`] has it.
pub(crate) fn source(kernel: &KernelDef) -> Option<&'static CudaSource> {
    gpuworld_hal::library::source_in(&LIBRARY, kernel)
}

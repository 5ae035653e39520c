//! The WGSL of the kernel library (`gpuworld_hal::library`), which the backend supplies
//! through `Backend::library_source`: each kernel's entry point and helpers; the bindings are
//! declared from the kernel's signature. Every kernel checks its indices in both execution modes
//! (loads out of bounds read 0, stores out of bounds are dropped).

mod matmul;
mod reduce;

use crate::wgsl::WgslSource;
use gpuworld_hal::kernel::KernelDef;
use gpuworld_hal::library::{self as lib, matmul as mm, reduce as rd};

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
pub(crate) use linear_main;

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
pub(crate) use tile_main;

/// The library's kernels and their WGSL.
pub(crate) static LIBRARY: [(&KernelDef, WgslSource); 6] = [
    (&lib::NOOP, NOOP),
    (&rd::REDUCE_SUM_TREE4, reduce::TREE4),
    (&rd::REDUCE_SUM_STRIDED, reduce::STRIDED),
    (&mm::MATMUL_NAIVE, matmul::NAIVE),
    (&mm::MATMUL_4X4, matmul::FOUR_BY_FOUR),
    (&mm::MATMUL_TILED16, matmul::TILED16),
];

const NOOP: WgslSource = WgslSource(
    "@compute @workgroup_size(1, 1, 1)
fn main() {}
",
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wgsl::{check_source, wgsl_text};

    #[test]
    fn the_wgsl_table_holds_only_kernels_of_library_all() {
        for (kernel, _) in &LIBRARY {
            assert!(
                lib::ALL.iter().any(|k| std::ptr::eq(*k, *kernel)),
                "{}",
                kernel.id
            );
        }
    }

    #[test]
    fn every_library_kernel_has_wgsl_that_parses_with_its_cube_dim() {
        for kernel in lib::ALL {
            let text = wgsl_text(kernel).unwrap_or_else(|| panic!("{} has no WGSL", kernel.id));
            if let Err(error) = naga::front::wgsl::parse_str(&text) {
                panic!("{}: {}", kernel.id, error.emit_to_string(&text));
            }
            assert_eq!(check_source(kernel, &text), Ok(()), "{}", kernel.id);
        }
    }
}

//! The WGSL of the library kernels that stay hand-written (`gpuworld_hal::library`), which the
//! backend supplies through `Kernels::library_source`: each kernel's entry point and helpers; the
//! bindings are declared from the kernel's signature. Every kernel checks its indices in both
//! execution modes (loads out of bounds read 0, stores out of bounds are dropped). Every other
//! library kernel is a `#[kernel]` source whose WGSL the macro generates.

mod matmul;
mod tile;

use gpuworld_hal::kernel::{KernelDef, WgslSource};
#[cfg(test)]
use gpuworld_hal::library as lib;
use gpuworld_hal::library::matmul as mm;

/// The hand-written library kernels and their WGSL.
pub(crate) static LIBRARY: [(&KernelDef, WgslSource); 1] = [(&mm::MATMUL_TILED16, matmul::TILED16)];

/// The hand-written WGSL of `kernel`, if [`LIBRARY`] has it.
pub(crate) fn source(kernel: &KernelDef) -> Option<&'static WgslSource> {
    gpuworld_hal::library::source_in(&LIBRARY, kernel)
}

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

//! The kernel library (`gpuworld_systems::library`) as this backend compiles it: every kernel is
//! a `#[kernel]` source whose WGSL the macro generates (the hand-written WGSL the backend once
//! supplied through `Backend::library_source` is gone; `benches/kernels.rs` keeps it to compare
//! times).

#[cfg(test)]
mod tests {
    use crate::wgsl::{check_source, wgsl_text};
    use gpuworld_systems::library as lib;

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

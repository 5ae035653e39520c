//! The WGSL of the kernel library (`gpuworld_systems::library`), which the backend supplies
//! through `Backend::library_source`: each kernel's entry point and helpers; the bindings are
//! declared from the kernel's signature. Every kernel checks its indices in both execution modes
//! (loads out of bounds read 0, stores out of bounds are dropped).

mod matmul;
mod reduce;

use crate::wgsl::WgslSource;
use gpuworld_systems::kernel::KernelDef;
use gpuworld_systems::library::{self as lib, matmul as mm, reduce as rd};

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
pub(crate) static LIBRARY: [(&KernelDef, WgslSource); 12] = [
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

const NOOP: WgslSource = WgslSource(
    "@compute @workgroup_size(1, 1, 1)
fn main() {}
",
);

const FILL: WgslSource = WgslSource(concat!(
    linear_main!(),
    "    if i < arrayLength(&out) {
        out[i] = scalars.value;
    }
}
"
));

const COPY: WgslSource = WgslSource(concat!(
    linear_main!(),
    "    if i < arrayLength(&dst) {
        var value = 0u;
        if i < arrayLength(&src) {
            value = src[i];
        }
        dst[i] = value;
    }
}
"
));

const ADD: WgslSource = WgslSource(concat!(
    "fn load_a(i: u32) -> f32 {
    if i < arrayLength(&a) {
        return a[i];
    }
    return 0.0;
}

fn load_b(i: u32) -> f32 {
    if i < arrayLength(&b) {
        return b[i];
    }
    return 0.0;
}

",
    linear_main!(),
    "    if i < arrayLength(&out) {
        out[i] = load_a(i) + load_b(i);
    }
}
"
));

const SCALE: WgslSource = WgslSource(concat!(
    linear_main!(),
    "    if i < arrayLength(&out) {
        var value = 0.0;
        if i < arrayLength(&x) {
            value = x[i];
        }
        out[i] = value * scalars.factor;
    }
}
"
));

const STENCIL: WgslSource = WgslSource(concat!(
    "fn load(i: u32) -> f32 {
    if i < arrayLength(&u) {
        return u[i];
    }
    return 0.0;
}

",
    tile_main!(),
    "    let width = scalars.width;
    let height = scalars.height;
    let x = cube.x * 16u + unit.x;
    let y = cube.y * 16u + unit.y;
    if x >= width || y >= height {
        return;
    }
    let i = y * width + x;
    let center = load(i);
    var value = center;
    let border = x == 0u || y == 0u || x + 1u == width || y + 1u == height;
    if !border {
        let sum = load(i - 1u) + load(i + 1u) + load(i - width) + load(i + width);
        value = center + scalars.alpha * (sum - 4.0 * center);
    }
    if i < arrayLength(&out) {
        out[i] = value;
    }
}
"
));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wgsl::{check_source, wgsl_text};

    #[test]
    fn the_wgsl_table_holds_every_kernel_of_library_all_and_nothing_else() {
        assert_eq!(LIBRARY.len(), lib::ALL.len());
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

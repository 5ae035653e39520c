//! WGSL of the reduce-sum variants (`gpuworld_hal::library::reduce`): each unit sums its
//! share of `input[..n]`, then the cube's units add their values up in one tree in workgroup
//! memory, shared by every variant.

use super::linear_main;
use crate::wgsl::WgslSource;

/// The tree every variant ends with: sums `value` over the cube's 256 units and unit 0 writes
/// the total to `output[c]`. Call it from uniform control flow (it holds barriers).
macro_rules! tree_sum {
    () => {
        "var<workgroup> partial: array<f32, 256>;

fn sum_cube_into_output(c: u32, unit: u32, value: f32) {
    partial[unit] = value;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if unit < stride {
            partial[unit] = partial[unit] + partial[unit + stride];
        }
        workgroupBarrier();
    }
    if unit == 0u && c < arrayLength(&output) {
        output[c] = partial[0];
    }
}

"
    };
}

/// Four elements per unit, 1024 per cube.
pub(super) const TREE4: WgslSource = WgslSource(concat!(
    tree_sum!(),
    linear_main!(),
    "    let n = min(scalars.n, arrayLength(&input));
    var value = 0.0;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let e = c * 1024u + j * 256u + unit;
        if e < n {
            value = value + input[e];
        }
    }
    sum_cube_into_output(c, unit, value);
}
"
));

/// Elements `i, i + T, ...` per unit, `T` the launch's units.
pub(super) const STRIDED: WgslSource = WgslSource(concat!(
    tree_sum!(),
    linear_main!(),
    "    let n = min(scalars.n, arrayLength(&input));
    let total = count.x * count.y * count.z * 256u;
    var value = 0.0;
    for (var e = i; e < n; e = e + total) {
        value = value + input[e];
    }
    sum_cube_into_output(c, unit, value);
}
"
));

//! WGSL sources of the kernel library, for the wgpu backend. `None` marks a kernel the wgpu
//! backend cannot run yet.
//!
//! The binding convention every WGSL kernel follows (the wgpu backend builds its bind group
//! layouts from it, so a source that departs from it fails pipeline validation):
//! - buffer `i` of the launch is `@group(0) @binding(i) var<storage, read_write> array<f32>` (or
//!   `array<u32>`), bound to exactly the launch's byte range, so `arrayLength` is the binding's
//!   length in 32-bit words (a trailing partial word is not visible);
//! - the kernel's 32-bit scalars, if it has any, are one `var<uniform>` struct at
//!   `@binding(<number of buffers>)`, in launch order, padded to a multiple of 16 bytes;
//! - the entry point is `main`, its `@workgroup_size` is the kernel's `cube_dim`;
//! - a cube is a workgroup; 1-D kernels flatten the workgroup id as the CPU's
//!   `CubeContext::cube_index` does (`x + count_x * (y + count_y * z)`) and index unit
//!   `cube_index * units_per_cube + local_invocation_index`;
//! - checked mode must never access outside `arrayLength`: every kernel here checks its index
//!   (loads out of bounds read 0, stores out of bounds are dropped), in both modes.

/// Source of `noop`.
pub const NOOP: Option<&str> = Some(
    "@compute @workgroup_size(1, 1, 1)
fn main() {}
",
);

/// Source of `fill`.
pub const FILL: Option<&str> = Some(
    "struct Scalars { value: f32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> scalars: Scalars;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let i = (cube.x + count.x * (cube.y + count.y * cube.z)) * 256u + unit;
    if i < arrayLength(&out) {
        out[i] = scalars.value;
    }
}
",
);

/// Source of `copy`.
pub const COPY: Option<&str> = Some(
    "@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let i = (cube.x + count.x * (cube.y + count.y * cube.z)) * 256u + unit;
    if i < arrayLength(&dst) {
        var value = 0u;
        if i < arrayLength(&src) {
            value = src[i];
        }
        dst[i] = value;
    }
}
",
);

/// Source of `add`.
pub const ADD: Option<&str> = Some(
    "@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn load_a(i: u32) -> f32 {
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

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let i = (cube.x + count.x * (cube.y + count.y * cube.z)) * 256u + unit;
    if i < arrayLength(&out) {
        out[i] = load_a(i) + load_b(i);
    }
}
",
);

/// Source of `scale`.
pub const SCALE: Option<&str> = Some(
    "struct Scalars { factor: f32, pad0: u32, pad1: u32, pad2: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(num_workgroups) count: vec3<u32>,
    @builtin(local_invocation_index) unit: u32,
) {
    let i = (cube.x + count.x * (cube.y + count.y * cube.z)) * 256u + unit;
    if i < arrayLength(&out) {
        var value = 0.0;
        if i < arrayLength(&x) {
            value = x[i];
        }
        out[i] = value * scalars.factor;
    }
}
",
);

/// Source of `stencil2d`.
pub const STENCIL: Option<&str> = Some(
    "struct Scalars { width: u32, height: u32, alpha: f32, pad0: u32 }

@group(0) @binding(0) var<storage, read_write> u: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;

fn load(i: u32) -> f32 {
    if i < arrayLength(&u) {
        return u[i];
    }
    return 0.0;
}

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
    let width = scalars.width;
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
",
);

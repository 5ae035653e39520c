//! The pieces of WGSL the hand-written library kernels share.

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

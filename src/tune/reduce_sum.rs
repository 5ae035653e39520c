//! The `gpuworld.reduce_sum` tunable set: the library's reduce-sum variants
//! (`library::reduce`), keyed by the power-of-two bucket of the length, benchmarked on a
//! generated input of the bucket's length. Output: a handle of one `f32`.

use super::checks::compare_f32_outputs;
use super::key::{TuneKey, pow2_bucket};
use super::tunable::TunableSet;
use crate::{Bindings, ComputeClient};
use gpuworld_systems::library::reduce::{
    REDUCE_SUM_STRIDED, REDUCE_SUM_TREE, REDUCE_SUM_TREE4, TREE_ELEMENTS_PER_CUBE,
    TREE4_ELEMENTS_PER_CUBE,
};
use gpuworld_systems::{Backend, CubeCount, Handle, Kernel, Result};

/// The set's name.
pub const REDUCE_SUM_SET: &str = "gpuworld.reduce_sum";
/// Cubes of the first pass of the strided variant.
pub const STRIDED_CUBES: u32 = 64;
/// Relative tolerance of the output check: the variants add in different orders.
const TOLERANCE: f32 = 1e-3;

/// What to sum: the first `len` `f32` of `input`.
#[derive(Clone, Debug)]
pub struct ReduceInput {
    /// The values.
    pub input: Handle,
    /// How many of them.
    pub len: u32,
}

/// The reduce-sum candidates: `tree` (256 elements per cube and pass), `tree4` (1024), and
/// `strided` (64 grid-strided cubes, then one cube over their partials).
pub fn reduce_sum_set<B: Backend>() -> TunableSet<B, ReduceInput, Handle> {
    TunableSet::new(REDUCE_SUM_SET, reduce_key, reduce_inputs)
        .candidate("tree", |client, input: &ReduceInput| {
            reduce_in_passes(client, &REDUCE_SUM_TREE, TREE_ELEMENTS_PER_CUBE, input)
        })
        .candidate("tree4", |client, input: &ReduceInput| {
            reduce_in_passes(client, &REDUCE_SUM_TREE4, TREE4_ELEMENTS_PER_CUBE, input)
        })
        .candidate("strided", reduce_strided)
        .output_check(|client, reference, other| {
            compare_f32_outputs(client, reference, other, TOLERANCE)
        })
}

/// The key of a reduce: the length's power-of-two bucket.
pub fn reduce_key(input: &ReduceInput) -> TuneKey {
    TuneKey::new([pow2_bucket(u64::from(input.len))])
}

/// A benchmark input of the key's length, with small values whose sum `f32` holds well.
fn reduce_inputs<B: Backend>(
    client: &ComputeClient<B>,
    key: &TuneKey,
    _input: &ReduceInput,
) -> Result<ReduceInput> {
    let len = key.part(0);
    let values: Vec<f32> = (0..len).map(|i| (i % 17) as f32 / 16.0).collect();
    Ok(ReduceInput {
        input: client.create_from_slice(bytemuck::cast_slice(&values)),
        len,
    })
}

/// Enough cubes for `cubes`, laid out in two dimensions past the device's limit along x.
fn linear_grid<B: Backend>(client: &ComputeClient<B>, cubes: u32) -> CubeCount {
    let max_x = client.properties().max_cube_count[0].max(1);
    if cubes <= max_x {
        CubeCount::new_1d(cubes)
    } else {
        CubeCount::new_2d(max_x, cubes.div_ceil(max_x))
    }
}

/// Runs `kernel` pass after pass over the partial sums until one value is left.
fn reduce_in_passes<B: Backend>(
    client: &ComputeClient<B>,
    kernel: Kernel,
    per_cube: u32,
    input: &ReduceInput,
) -> Result<Handle> {
    let mut source = input.input.clone();
    let mut len = input.len;
    loop {
        let cubes = len.div_ceil(per_cube).max(1);
        let partials = client.empty(u64::from(cubes) * 4);
        let bindings = Bindings::new()
            .buffer(&source)
            .buffer(&partials)
            .scalar_u32(len);
        client.launch(kernel, linear_grid(client, cubes), bindings)?;
        if cubes == 1 {
            return Ok(partials);
        }
        source = partials;
        len = cubes;
    }
}

/// Grid-strided first pass over at most [`STRIDED_CUBES`] cubes, then one cube.
fn reduce_strided<B: Backend>(client: &ComputeClient<B>, input: &ReduceInput) -> Result<Handle> {
    let cubes = input
        .len
        .div_ceil(REDUCE_SUM_STRIDED.signature.cube_dim[0])
        .clamp(1, STRIDED_CUBES);
    let partials = client.empty(u64::from(cubes) * 4);
    let first = Bindings::new()
        .buffer(&input.input)
        .buffer(&partials)
        .scalar_u32(input.len);
    client.launch(&REDUCE_SUM_STRIDED, CubeCount::new_1d(cubes), first)?;
    if cubes == 1 {
        return Ok(partials);
    }
    let total = client.empty(4);
    let second = Bindings::new()
        .buffer(&partials)
        .buffer(&total)
        .scalar_u32(cubes);
    client.launch(&REDUCE_SUM_STRIDED, CubeCount::new_1d(1), second)?;
    Ok(total)
}

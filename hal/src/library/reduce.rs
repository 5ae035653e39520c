//! Reduce-sum variants, the candidates of the `reduce_sum` tunable set. Each kernel sums part of
//! `input[..n]` per cube into `output[cube]` (buffers: input, output; scalars: n); the host
//! repeats passes over the partial sums until one value is left. They differ in how much each
//! cube covers: 256 elements (one per unit), 1024 (four per unit), or a grid-strided share of
//! the whole input (a fixed number of cubes, then one cube over their partials).
//! [`REDUCE_SUM_TREE`] is one `#[kernel]` source: the same tree of halvings on every backend,
//! the same bits. The other variants keep a source per backend: a GPU cube reduces its units'
//! values with a tree in workgroup memory, a CPU cube runs its units in a loop, so its "tree" is
//! a plain sum (results agree within float rounding).

use crate::kernel::{CpuSource, CubeContext, KernelDef, KernelIo, Param, Signature};
use std::sync::atomic::Ordering;

/// Units per cube of every reduce-sum variant.
pub const REDUCE_CUBE: u32 = 256;
/// Elements one cube of [`REDUCE_SUM_TREE`] sums.
pub const TREE_ELEMENTS_PER_CUBE: u32 = REDUCE_CUBE;
/// Elements one cube of [`REDUCE_SUM_TREE4`] sums.
pub const TREE4_ELEMENTS_PER_CUBE: u32 = 4 * REDUCE_CUBE;

/// What every variant binds: the input, the partial sums, the number of elements to sum.
const SIGNATURE: Signature = Signature {
    buffers: &[Param::f32("input").read_only(), Param::f32("output")],
    scalars: &[Param::u32("n")],
    cube_dim: [REDUCE_CUBE, 1, 1],
};

/// The number of elements a launch may read: the scalar `n`, clipped to the input binding.
fn element_count(io: &KernelIo<'_>) -> usize {
    (io.scalar_u32(0) as usize).min(io.len32(0))
}

/// Sums `per_cube` contiguous elements starting at this cube's first one.
fn sum_contiguous(ctx: &CubeContext, io: &KernelIo<'_>, per_cube: u64) {
    let n = element_count(io) as u64;
    let cube = ctx.cube_index();
    let start = (cube * per_cube).min(n);
    let end = (start + per_cube).min(n);
    // `n` is clipped to the input, so the binding holds the whole range.
    let words = io
        .buffer(0)
        .words(start as usize..end as usize)
        .unwrap_or(&[]);
    let sum: f32 = words
        .iter()
        .map(|word| f32::from_bits(word.load(Ordering::Relaxed)))
        .sum();
    io.store_f32(1, cube as usize, sum);
}

mod tree {
    use crate::kernel;

    /// One pass of a tree reduction: `output[c] = sum(input[c*256 .. c*256+256])` (of the first `n`
    /// elements), added as a tree of halvings in shared memory on every backend, so every backend
    /// gives the same bits.
    #[kernel(crate = crate, id = "gpuworld.reduce_sum_tree", cube_dim = 256)]
    pub fn reduce_sum_tree(input: &[f32], output: &mut [f32], n: u32) {
        let partial = shared::<f32, 256>();
        let limit = n.min(input.len());
        let i = cube() * 256 + unit();
        partial[unit()] = if i < limit { input[i] } else { 0.0 };
        sync_cube();
        for step in 0..8 {
            let stride = 128 >> step;
            if unit() < stride {
                partial[unit()] = partial[unit()] + partial[unit() + stride];
            }
            sync_cube();
        }
        if unit() == 0 {
            output[cube()] = partial[0];
        }
    }
}

pub use tree::reduce_sum_tree as REDUCE_SUM_TREE;

/// One pass where each unit first sums four elements: `output[c] = sum(input[c*1024 ..][..1024])`.
pub static REDUCE_SUM_TREE4: KernelDef = KernelDef {
    id: "gpuworld.reduce_sum_tree4",
    name: "reduce_sum_tree4",
    signature: SIGNATURE,
    sources: &[&CpuSource(|cube, io| {
        sum_contiguous(cube, io, u64::from(TREE4_ELEMENTS_PER_CUBE));
    })],
};

/// Grid-strided sum: unit `g` of the launch sums `input[g], input[g + T], ...` (`T` = all units
/// of the launch), and each cube writes its units' total to `output[c]`. With one cube it sums
/// everything.
pub static REDUCE_SUM_STRIDED: KernelDef = KernelDef {
    id: "gpuworld.reduce_sum_strided",
    name: "reduce_sum_strided",
    signature: SIGNATURE,
    sources: &[&CpuSource(|ctx, io| {
        let n = element_count(io);
        let units = ctx.units() as usize;
        let total = ctx
            .cube_count
            .iter()
            .map(|&c| c as usize)
            .product::<usize>()
            * units;
        let first = ctx.first_unit_1d() as usize;
        let input = io.buffer(0);
        let mut sum = 0.0f32;
        for unit in first..first + units {
            sum += (unit..n)
                .step_by(total.max(1))
                .map(|i| input.load_f32(i))
                .sum::<f32>();
        }
        io.store_f32(1, ctx.cube_index() as usize, sum);
    })],
};

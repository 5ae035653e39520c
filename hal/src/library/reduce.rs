//! Reduce-sum variants, the candidates of the `reduce_sum` tunable set. Each kernel sums part of
//! `input[..n]` per cube into `output[cube]` (buffers: input, output; scalars: n); the host
//! repeats passes over the partial sums until one value is left. They differ in how much each
//! cube covers: 256 elements (one per unit), 1024 (four per unit), or a grid-strided share of
//! the whole input (a fixed number of cubes, then one cube over their partials).
//! Every variant is one `#[kernel]` source: each unit sums its share in order, then the cube's
//! units add their values up in one tree of halvings in shared memory — the same additions on
//! every backend, so the same bits on cpu, sim, wgpu and CUDA. (Until 2026-12-06 the four- and
//! strided variants were hand-written WGSL and CUDA C, with a CPU source that summed a cube in a
//! plain loop; `benches/kernels.rs` keeps that WGSL and CUDA C and compares their times.)

/// Units per cube of every reduce-sum variant.
pub const REDUCE_CUBE: u32 = 256;
/// Elements one cube of [`REDUCE_SUM_TREE`] sums.
pub const TREE_ELEMENTS_PER_CUBE: u32 = REDUCE_CUBE;
/// Elements one cube of [`REDUCE_SUM_TREE4`] sums.
pub const TREE4_ELEMENTS_PER_CUBE: u32 = 4 * REDUCE_CUBE;

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

    /// One pass where each unit first sums four elements: `output[c] = sum(input[c*1024 ..][..1024])`
    /// (of the first `n` elements), unit `u` adding elements `u, u + 256, u + 512, u + 768` of
    /// its cube's block in order to 0, then the cube's tree. Its four loads are issued before the
    /// additions and its shared indices masked (`& 255`, a no-op in a cube of 256 units, which
    /// lets the compiler drop the bounds check of each shared access): written plainly it took
    /// 1.6x the hand-written CUDA C's time, written so 0.99–1.00x (and 0.75x the hand-written
    /// WGSL's on NVIDIA Vulkan; `benches/kernels.rs`, H100).
    #[kernel(crate = crate, id = "gpuworld.reduce_sum_tree4", cube_dim = 256)]
    pub fn reduce_sum_tree4(input: &[f32], output: &mut [f32], n: u32) {
        let partial = shared::<f32, 256>();
        let limit = n.min(input.len());
        let base = cube() * 1024 + unit();
        let v0 = if base < limit { input[base] } else { 0.0 };
        let v1 = if base + 256 < limit {
            input[base + 256]
        } else {
            0.0
        };
        let v2 = if base + 512 < limit {
            input[base + 512]
        } else {
            0.0
        };
        let v3 = if base + 768 < limit {
            input[base + 768]
        } else {
            0.0
        };
        partial[unit() & 255] = (((0.0 + v0) + v1) + v2) + v3;
        sync_cube();
        for step in 0..8 {
            let stride = 128 >> step;
            if unit() < stride {
                partial[unit() & 255] = partial[unit() & 255] + partial[(unit() + stride) & 255];
            }
            sync_cube();
        }
        if unit() == 0 {
            output[cube()] = partial[0];
        }
    }

    /// Grid-strided sum: unit `g` of the launch sums `input[g], input[g + T], ...` (`T` = all
    /// units of the launch) in order, and each cube writes its units' total (the cube's tree) to
    /// `output[c]`. With one cube it sums everything.
    #[kernel(crate = crate, id = "gpuworld.reduce_sum_strided", cube_dim = 256)]
    pub fn reduce_sum_strided(input: &[f32], output: &mut [f32], n: u32) {
        let partial = shared::<f32, 256>();
        let limit = n.min(input.len());
        let total = cube_count_x() * cube_count_y() * cube_count_z() * 256;
        let mut value = 0.0;
        let mut e = cube() * 256 + unit();
        while e < limit {
            value += input[e];
            e += total;
        }
        partial[unit()] = value;
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

pub use tree::{
    reduce_sum_strided as REDUCE_SUM_STRIDED, reduce_sum_tree as REDUCE_SUM_TREE,
    reduce_sum_tree4 as REDUCE_SUM_TREE4,
};

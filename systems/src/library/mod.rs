//! The kernel library shipped with gpuworld: used by tests, benches, autotune and the demo.
//! Every kernel works on `f32` elements. The CPU sources are here; the WGSL and CUDA sources
//! live in `wgsl.rs` and `cuda.rs`, one constant per kernel.

pub mod cuda;
pub mod matmul;
pub mod reduce;
pub mod wgsl;

use crate::kernel::{CubeContext, KernelDef, KernelIo};

/// Units per cube of the 1-D kernels.
pub const LINEAR_CUBE: u32 = 256;
/// Units per cube side of the 2-D stencil.
pub const STENCIL_TILE: u32 = 16;

fn for_each_unit(ctx: &CubeContext, len: usize, mut f: impl FnMut(usize)) {
    let start = ctx.first_unit_1d();
    let end = (start + ctx.units()).min(len as u64);
    for i in start..end {
        f(i as usize);
    }
}

/// Does nothing; measures launch overhead.
pub static NOOP: KernelDef = KernelDef {
    id: "gpuworld.noop",
    name: "noop",
    cube_dim: [1, 1, 1],
    buffers: 0,
    scalars: 0,
    cpu: Some(|_, _| {}),
    wgsl: wgsl::NOOP,
    cuda: cuda::NOOP,
};

/// `out[i] = value` — buffers: out; scalars: value (f32 bits).
pub static FILL: KernelDef = KernelDef {
    id: "gpuworld.fill",
    name: "fill",
    cube_dim: [LINEAR_CUBE, 1, 1],
    buffers: 1,
    scalars: 1,
    cpu: Some(|ctx, io: &KernelIo<'_>| {
        let value = io.scalar_f32(0);
        for_each_unit(ctx, io.len32(0), |i| io.store_f32(0, i, value));
    }),
    wgsl: wgsl::FILL,
    cuda: cuda::FILL,
};

/// `dst[i] = src[i]` — buffers: src, dst.
pub static COPY: KernelDef = KernelDef {
    id: "gpuworld.copy",
    name: "copy",
    cube_dim: [LINEAR_CUBE, 1, 1],
    buffers: 2,
    scalars: 0,
    cpu: Some(|ctx, io: &KernelIo<'_>| {
        for_each_unit(ctx, io.len32(1), |i| io.store_u32(1, i, io.load_u32(0, i)));
    }),
    wgsl: wgsl::COPY,
    cuda: cuda::COPY,
};

/// `out[i] = a[i] + b[i]` — buffers: a, b, out.
pub static ADD: KernelDef = KernelDef {
    id: "gpuworld.add",
    name: "add",
    cube_dim: [LINEAR_CUBE, 1, 1],
    buffers: 3,
    scalars: 0,
    cpu: Some(|ctx, io: &KernelIo<'_>| {
        for_each_unit(ctx, io.len32(2), |i| {
            io.store_f32(2, i, io.load_f32(0, i) + io.load_f32(1, i));
        });
    }),
    wgsl: wgsl::ADD,
    cuda: cuda::ADD,
};

/// `out[i] = x[i] * factor` — buffers: x, out; scalars: factor (f32 bits).
pub static SCALE: KernelDef = KernelDef {
    id: "gpuworld.scale",
    name: "scale",
    cube_dim: [LINEAR_CUBE, 1, 1],
    buffers: 2,
    scalars: 1,
    cpu: Some(|ctx, io: &KernelIo<'_>| {
        let factor = io.scalar_f32(0);
        for_each_unit(ctx, io.len32(1), |i| {
            io.store_f32(1, i, io.load_f32(0, i) * factor);
        });
    }),
    wgsl: wgsl::SCALE,
    cuda: cuda::SCALE,
};

/// One explicit heat-diffusion step on a `width x height` grid with fixed borders:
/// `out = u + alpha * (north + south + east + west - 4u)` — buffers: u, out;
/// scalars: width, height, alpha (f32 bits). Launch one cube per 16x16 tile.
pub static STENCIL: KernelDef = KernelDef {
    id: "gpuworld.stencil2d",
    name: "stencil2d",
    cube_dim: [STENCIL_TILE, STENCIL_TILE, 1],
    buffers: 2,
    scalars: 3,
    cpu: Some(|ctx, io: &KernelIo<'_>| {
        let width = io.scalar_u32(0) as usize;
        let height = io.scalar_u32(1) as usize;
        let alpha = io.scalar_f32(2);
        let tile = STENCIL_TILE as usize;
        let x0 = ctx.cube_pos[0] as usize * tile;
        let y0 = ctx.cube_pos[1] as usize * tile;
        for y in y0..(y0 + tile).min(height) {
            for x in x0..(x0 + tile).min(width) {
                let i = y * width + x;
                let u = io.load_f32(0, i);
                let border = x == 0 || y == 0 || x + 1 == width || y + 1 == height;
                let value = if border {
                    u
                } else {
                    let sum = io.load_f32(0, i - 1)
                        + io.load_f32(0, i + 1)
                        + io.load_f32(0, i - width)
                        + io.load_f32(0, i + width);
                    u + alpha * (sum - 4.0 * u)
                };
                io.store_f32(1, i, value);
            }
        }
    }),
    wgsl: wgsl::STENCIL,
    cuda: cuda::STENCIL,
};

/// Every kernel of the library.
pub fn all() -> [&'static KernelDef; 6] {
    [&NOOP, &FILL, &COPY, &ADD, &SCALE, &STENCIL]
}

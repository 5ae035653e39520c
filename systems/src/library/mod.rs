//! The kernel library shipped with gpuworld: used by tests, benches, autotune and the demo.
//! Every kernel works on `f32` elements. Each definition here carries its CPU source; the wgpu
//! and cuda backends supply their WGSL and CUDA C for these kernels themselves
//! (`Backend::library_source`), next to their code.

pub mod matmul;
pub mod reduce;

use crate::kernel::{CpuSource, KernelDef, Param, Signature};

/// Units per cube of the 1-D kernels.
pub const LINEAR_CUBE: u32 = 256;
/// Units per cube side of the 2-D stencil.
pub const STENCIL_TILE: u32 = 16;

/// Does nothing; measures launch overhead.
pub static NOOP: KernelDef = KernelDef {
    id: "gpuworld.noop",
    name: "noop",
    signature: Signature {
        buffers: &[],
        scalars: &[],
        cube_dim: [1, 1, 1],
    },
    sources: &[&CpuSource(|_, _| {})],
};

/// `out[i] = value`.
pub static FILL: KernelDef = KernelDef {
    id: "gpuworld.fill",
    name: "fill",
    signature: Signature {
        buffers: &[Param::f32("out")],
        scalars: &[Param::f32("value")],
        cube_dim: [LINEAR_CUBE, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        let value = io.scalar_f32(0);
        io.map_f32(cube.units_1d(io.len32(0)), [], 0, |[]| value);
    })],
};

/// `dst[i] = src[i]`, word by word.
pub static COPY: KernelDef = KernelDef {
    id: "gpuworld.copy",
    name: "copy",
    signature: Signature {
        buffers: &[Param::u32("src"), Param::u32("dst")],
        scalars: &[],
        cube_dim: [LINEAR_CUBE, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        io.map_u32(cube.units_1d(io.len32(1)), [0], 1, |[src]| src);
    })],
};

/// `out[i] = a[i] + b[i]`.
pub static ADD: KernelDef = KernelDef {
    id: "gpuworld.add",
    name: "add",
    signature: Signature {
        buffers: &[Param::f32("a"), Param::f32("b"), Param::f32("out")],
        scalars: &[],
        cube_dim: [LINEAR_CUBE, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        io.map_f32(cube.units_1d(io.len32(2)), [0, 1], 2, |[a, b]| a + b);
    })],
};

/// `out[i] = x[i] * factor`.
pub static SCALE: KernelDef = KernelDef {
    id: "gpuworld.scale",
    name: "scale",
    signature: Signature {
        buffers: &[Param::f32("x"), Param::f32("out")],
        scalars: &[Param::f32("factor")],
        cube_dim: [LINEAR_CUBE, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        let factor = io.scalar_f32(0);
        io.map_f32(cube.units_1d(io.len32(1)), [0], 1, |[x]| x * factor);
    })],
};

/// One explicit heat-diffusion step on a `width x height` grid with fixed borders:
/// `out = u + alpha * (north + south + east + west - 4u)`. Launch one cube per 16x16 tile.
pub static STENCIL: KernelDef = KernelDef {
    id: "gpuworld.stencil2d",
    name: "stencil2d",
    signature: Signature {
        buffers: &[Param::f32("u"), Param::f32("out")],
        scalars: &[
            Param::u32("width"),
            Param::u32("height"),
            Param::f32("alpha"),
        ],
        cube_dim: [STENCIL_TILE, STENCIL_TILE, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        let width = io.scalar_u32(0) as usize;
        let height = io.scalar_u32(1) as usize;
        let alpha = io.scalar_f32(2);
        let tile = STENCIL_TILE as usize;
        let x0 = cube.cube_pos[0] as usize * tile;
        let y0 = cube.cube_pos[1] as usize * tile;
        let (grid, out) = (io.buffer(0), io.buffer(1));
        for y in y0..(y0 + tile).min(height) {
            for x in x0..(x0 + tile).min(width) {
                let i = y * width + x;
                let u = grid.load_f32(i);
                let border = x == 0 || y == 0 || x + 1 == width || y + 1 == height;
                let value = if border {
                    u
                } else {
                    let sum = grid.load_f32(i - 1)
                        + grid.load_f32(i + 1)
                        + grid.load_f32(i - width)
                        + grid.load_f32(i + width);
                    u + alpha * (sum - 4.0 * u)
                };
                out.store_f32(i, value);
            }
        }
    })],
};

/// Every kernel of the library.
pub fn all() -> [&'static KernelDef; 6] {
    [&NOOP, &FILL, &COPY, &ADD, &SCALE, &STENCIL]
}

/// The source for `kernel` in a backend's `table` of library kernels and their sources, found by
/// the definition's address (not its id): how a backend implements `Backend::library_source`.
pub fn source_in<S>(
    table: &'static [(&'static KernelDef, S)],
    kernel: &KernelDef,
) -> Option<&'static S> {
    table
        .iter()
        .find(|(def, _)| std::ptr::eq(*def, kernel))
        .map(|(_, source)| source)
}

/// Every kernel of the library and its tunable variants: what a backend supplies sources for.
pub fn all_with_variants() -> impl Iterator<Item = &'static KernelDef> {
    all().into_iter().chain(reduce::all()).chain(matmul::all())
}

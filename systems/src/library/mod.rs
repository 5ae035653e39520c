//! The kernel library shipped with gpuworld: used by tests, benches, autotune and the demo.
//! Every kernel works on `f32` elements. Each definition here carries its CPU source; the wgpu
//! and cuda backends supply their WGSL and CUDA C for these kernels themselves
//! (`Backend::library_source`), next to their code.

pub mod matmul;
pub mod reduce;

use crate::kernel::{BufferIo, CpuSource, KernelDef, Param, Signature};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

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
        buffers: &[Param::u32("src").read_only(), Param::u32("dst")],
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
        buffers: &[
            Param::f32("a").read_only(),
            Param::f32("b").read_only(),
            Param::f32("out"),
        ],
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
        buffers: &[Param::f32("x").read_only(), Param::f32("out")],
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
        buffers: &[Param::f32("u").read_only(), Param::f32("out")],
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
        let xs = x0..(x0 + tile).min(width);
        for y in y0..(y0 + tile).min(height) {
            let border_row = y == 0 || y + 1 == height;
            if !border_row && stencil_row_in_bounds(grid, out, y, xs.clone(), width, alpha) {
                continue;
            }
            for x in xs.clone() {
                let i = y * width + x;
                let u = grid.load_f32(i);
                let border = x == 0 || border_row || x + 1 == width;
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

/// Columns `xs` of row `y` (not a border row) of a stencil step, when both bindings hold all
/// the row needs: checked once for the row instead of at every access. False, having done
/// nothing, otherwise. Elements are loaded and stored in the same order as one by one, so an
/// `out` bound to the same memory as `u` sees the same values.
fn stencil_row_in_bounds(
    grid: BufferIo<'_>,
    out: BufferIo<'_>,
    y: usize,
    xs: Range<usize>,
    width: usize,
    alpha: f32,
) -> bool {
    if xs.is_empty() {
        return true;
    }
    // The columns with a neighbour on each side; the grid's first and last are copied.
    let inner = xs.start.max(1)..xs.end.min(width - 1);
    let row = y * width;
    let (Some(above), Some(here), Some(below), Some(dst)) = (
        grid.words(row - width + inner.start..row - width + inner.end),
        grid.words(row + inner.start - 1..row + inner.end + 1),
        grid.words(row + width + inner.start..row + width + inner.end),
        out.words(row + xs.start..row + xs.end),
    ) else {
        return false;
    };
    let load = |word: &AtomicU32| f32::from_bits(word.load(Ordering::Relaxed));
    let (west_border, dst) = dst.split_at(usize::from(xs.start == 0));
    let (dst, east_border) = dst.split_at(inner.len());
    if let Some(word) = west_border.first() {
        word.store(here[0].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    let neighbours = here.windows(3).zip(above).zip(below);
    for (word, ((row, north), south)) in dst.iter().zip(neighbours) {
        let u = load(&row[1]);
        let sum = load(&row[0]) + load(&row[2]) + load(north) + load(south);
        word.store((u + alpha * (sum - 4.0 * u)).to_bits(), Ordering::Relaxed);
    }
    if let Some(word) = east_border.first() {
        word.store(
            here[here.len() - 1].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
    true
}

/// Every kernel of the library, its tunable variants included: what each backend supplies a
/// source for (the conformance suite launches each of them on every backend).
pub static ALL: &[&KernelDef] = &[
    &NOOP,
    &FILL,
    &COPY,
    &ADD,
    &SCALE,
    &STENCIL,
    &reduce::REDUCE_SUM_TREE,
    &reduce::REDUCE_SUM_TREE4,
    &reduce::REDUCE_SUM_STRIDED,
    &matmul::MATMUL_NAIVE,
    &matmul::MATMUL_4X4,
    &matmul::MATMUL_TILED16,
];

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

/// Runs `kernel`'s CPU source on every cube of a 2D `cube_count`, row by row, as a host backend
/// walks a launch in order: how the library's tests run a kernel without a runtime.
#[cfg(test)]
pub(crate) fn run_every_cube(
    kernel: &KernelDef,
    cube_count: [u32; 3],
    io: &crate::kernel::KernelIo<'_>,
) {
    let CpuSource(source) = *kernel.source::<CpuSource>().expect("a CPU source");
    for y in 0..cube_count[1] {
        for x in 0..cube_count[0] {
            let ctx = crate::kernel::CubeContext {
                cube_pos: [x, y, 0],
                cube_count,
                cube_dim: kernel.signature.cube_dim,
            };
            source(&ctx, io);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuBuffer, ExecutionMode, KernelIo};

    #[test]
    fn all_lists_each_library_kernel_once_with_its_cpu_source() {
        let mut ids: Vec<&str> = ALL.iter().map(|k| k.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len(), "two kernels of ALL share an id");
        for kernel in ALL {
            assert!(
                kernel.source::<CpuSource>().is_some(),
                "{} has no CPU source",
                kernel.id
            );
        }
    }

    /// One stencil step element by element, in the kernel's order: what the kernel must equal.
    fn stencil_by_element(io: &KernelIo<'_>, width: usize, height: usize, alpha: f32) {
        let tile = STENCIL_TILE as usize;
        for (ty, tx) in (0..height.div_ceil(tile))
            .flat_map(|ty| (0..width.div_ceil(tile)).map(move |tx| (ty, tx)))
        {
            for y in ty * tile..(ty * tile + tile).min(height) {
                for x in tx * tile..(tx * tile + tile).min(width) {
                    let i = y * width + x;
                    let u = io.load_f32(0, i);
                    let value = if x == 0 || y == 0 || x + 1 == width || y + 1 == height {
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
        }
    }

    fn stencil_by_kernel(io: &KernelIo<'_>, width: usize, height: usize) {
        let cube_count = [
            (width as u32).div_ceil(STENCIL_TILE),
            (height as u32).div_ceil(STENCIL_TILE),
            1,
        ];
        run_every_cube(&STENCIL, cube_count, io);
    }

    #[test]
    fn a_stencil_step_equals_the_step_element_by_element_on_any_grid_binding_or_alias() {
        let alpha = 0.2f32;
        for (width, height) in [(1, 1), (2, 5), (3, 3), (5, 2), (16, 16), (17, 19), (35, 20)] {
            let len = width * height;
            for (grid_len, out_len, aliased) in [
                (len, len, false),
                (len - len / 3, len, false),
                (len, len - len / 2, false),
                (len, len, true),
            ] {
                let run = |by_kernel: bool| {
                    let grid: Vec<AtomicU32> = (0..grid_len)
                        .map(|i| AtomicU32::new(((i * 7 % 11) as f32 - 4.5).to_bits()))
                        .collect();
                    let out: Vec<AtomicU32> = (0..out_len).map(|_| AtomicU32::new(9)).collect();
                    let views = if aliased {
                        [CpuBuffer::new(&grid), CpuBuffer::new(&grid)]
                    } else {
                        [CpuBuffer::new(&grid), CpuBuffer::new(&out)]
                    };
                    let scalars = [width as u32, height as u32, alpha.to_bits()];
                    let io = KernelIo::new(&views, &scalars, ExecutionMode::Checked);
                    if by_kernel {
                        stencil_by_kernel(&io, width, height);
                    } else {
                        stencil_by_element(&io, width, height, alpha);
                    }
                    let bits = |words: &[AtomicU32]| -> Vec<u32> {
                        words.iter().map(|w| w.load(Ordering::Relaxed)).collect()
                    };
                    (bits(&grid), bits(&out))
                };
                assert_eq!(
                    run(true),
                    run(false),
                    "{width}x{height}, grid {grid_len}, out {out_len}, aliased {aliased}"
                );
            }
        }
    }
}

//! The kernel library shipped with gpuworld: used by tests, benches, autotune and the demo.
//! Every kernel works on `f32` elements. Nearly all are `#[kernel]` sources (`crate::kernel`):
//! their CPU function, WGSL and CUDA C generated when this crate builds, the same bits on every
//! backend. A few keep a hand-written CPU source (`cpu = ..`) where the generated one checks every
//! access. Where the generated GPU code measured over 1.1x the hand-written time on the H100 and
//! H200 hosts (`MATMUL_4X4`'s CUDA C, `MATMUL_TILED16`'s WGSL and CUDA C; `matmul`'s docs say
//! why), the wgpu and cuda backends supply the hand-written source (`Kernels::library_source`).
//! `benches/kernels.rs` keeps the hand-written text the ports replaced and times both.

pub mod matmul;
pub mod reduce;

use crate::kernel::{BufferIo, CubeContext, KernelDef, KernelIo};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// Units per cube of the 1-D kernels.
pub const LINEAR_CUBE: u32 = 256;
/// Units per cube side of the 2-D stencil.
pub const STENCIL_TILE: u32 = 16;

/// The heat-diffusion stencil's body, written once: `stencil2d_kernel! { #[kernel(..)] fn name }`
/// makes a kernel of it with the given attributes. The library's [`STENCIL`] is one (with its
/// hand-written CPU source); the tests and benches that compare it with a fully generated copy
/// make that copy from the same body.
#[macro_export]
macro_rules! stencil2d_kernel {
    ($(#[$attr:meta])* $vis:vis fn $name:ident) => {
        $(#[$attr])*
        $vis fn $name(u: &[f32], out: &mut [f32], width: u32, height: u32, alpha: f32) {
            let x = cube_x() * 16 + unit_x();
            let y = cube_y() * 16 + unit_y();
            if x < width && y < height {
                let i = y * width + x;
                let center = u[i];
                let mut value = center;
                if x > 0 && y > 0 && x + 1 < width && y + 1 < height {
                    let sum = u[i - 1] + u[i + 1] + u[i - width] + u[i + width];
                    value = center + alpha * (sum - 4.0 * center);
                }
                out[i] = value;
            }
        }
    };
}
pub use stencil2d_kernel;

/// The library's simple kernels, each one `#[kernel]` source for every backend (issue 32):
/// `out[i] = value` and the like, checked per element, 256 units per cube; the stencil in
/// 16×16 tiles, with a hand-written CPU source ([`stencil_cpu`]) beside its generated WGSL and
/// CUDA C.
mod generated {
    use crate::kernel;

    /// Does nothing; measures launch overhead.
    #[kernel(crate = crate, id = "gpuworld.noop", cube_dim = 1)]
    pub fn noop() {}

    /// `out[i] = value`.
    #[kernel(crate = crate, id = "gpuworld.fill", cube_dim = 256)]
    pub fn fill(out: &mut [f32], value: f32) {
        let i = global_index();
        if i < out.len() {
            out[i] = value;
        }
    }

    /// `dst[i] = src[i]`, word by word.
    #[kernel(crate = crate, id = "gpuworld.copy", cube_dim = 256)]
    pub fn copy(src: &[u32], dst: &mut [u32]) {
        let i = global_index();
        if i < dst.len() {
            dst[i] = src[i];
        }
    }

    /// `out[i] = a[i] + b[i]`.
    #[kernel(crate = crate, id = "gpuworld.add", cube_dim = 256)]
    pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
        let i = global_index();
        if i < out.len() {
            out[i] = a[i] + b[i];
        }
    }

    /// `out[i] = x[i] * factor`.
    #[kernel(crate = crate, id = "gpuworld.scale", cube_dim = 256)]
    pub fn scale(x: &[f32], out: &mut [f32], factor: f32) {
        let i = global_index();
        if i < out.len() {
            out[i] = x[i] * factor;
        }
    }

    crate::stencil2d_kernel! {
        /// One explicit heat-diffusion step on a `width x height` grid with fixed borders:
        /// `out = u + alpha * (north + south + east + west - 4u)`. Launch one cube per 16x16
        /// tile.
        #[kernel(
            crate = crate,
            id = "gpuworld.stencil2d",
            cube_dim = [16, 16, 1],
            cpu = super::stencil_cpu
        )]
        pub fn stencil2d
    }
}

/// The stencil's CPU source, written by hand: rows whose elements both bindings hold are checked
/// once and run over slices, where the generated code checks every access (2x the time on the
/// H200 host's 16 cores). It computes what the generated source computes, in the same order
/// (`the_hand_written_stencil_gives_the_generated_bits`).
fn stencil_cpu(cube: &CubeContext, io: &KernelIo<'_>) {
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
                stencil_value(
                    u,
                    [
                        grid.load_f32(i - 1),
                        grid.load_f32(i + 1),
                        grid.load_f32(i - width),
                        grid.load_f32(i + width),
                    ],
                    alpha,
                )
            };
            out.store_f32(i, value);
        }
    }
}

/// One inner element of a stencil step, as the generated code computes it: `u + alpha * (sum -
/// 4u)` with the neighbours summed west, east, north, south, each operation's subnormal
/// operands and results flushed (`ops::ftz_f32`, the subset's rule).
#[inline]
fn stencil_value(u: f32, [west, east, north, south]: [f32; 4], alpha: f32) -> f32 {
    use crate::kernel::ops::ftz_f32 as ftz;
    let sum = ftz(ftz(ftz(ftz(west) + ftz(east)) + ftz(north)) + ftz(south));
    let u = ftz(u);
    ftz(u + ftz(ftz(alpha) * ftz(sum - ftz(4.0 * u))))
}

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
        let value = stencil_value(
            u,
            [load(&row[0]), load(&row[2]), load(north), load(south)],
            alpha,
        );
        word.store(value.to_bits(), Ordering::Relaxed);
    }
    if let Some(word) = east_border.first() {
        word.store(
            here[here.len() - 1].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
    true
}

pub use generated::{
    add as ADD, copy as COPY, fill as FILL, noop as NOOP, scale as SCALE, stencil2d as STENCIL,
};

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
/// the definition's address (not its id): how a backend implements `Kernels::library_source`.
pub fn source_in<S>(
    table: &'static [(&'static KernelDef, S)],
    kernel: &KernelDef,
) -> Option<&'static S> {
    table
        .iter()
        .find(|(def, _)| std::ptr::eq(*def, kernel))
        .map(|(_, source)| source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuBuffer, CpuSource, ExecutionMode, KernelIo};

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
        crate::kernel::run_every_cube(&STENCIL, cube_count, io);
    }

    crate::stencil2d_kernel! {
        /// The stencil as the macro generates it for the CPU, to check the hand-written one
        /// against.
        #[crate::kernel(crate = crate, id = "test.stencil2d", cube_dim = [16, 16, 1])]
        fn stencil2d_generated
    }

    #[test]
    fn the_hand_written_stencil_gives_the_generated_bits() {
        for (width, height) in [(1, 1), (2, 5), (16, 16), (17, 19), (35, 20), (64, 3)] {
            let len = width * height;
            for (grid_len, out_len, aliased) in [
                (len, len, false),
                (len - len / 3, len, false),
                (len, len - len / 2, false),
                (len, len, true),
            ] {
                let run = |kernel: &KernelDef| {
                    let grid: Vec<AtomicU32> = (0..grid_len)
                        .map(|i| match i % 5 {
                            // Subnormals of either sign: flushed alike by both.
                            3 => AtomicU32::new((i as u32).wrapping_mul(977) & 0x807f_ffff),
                            _ => AtomicU32::new(((i * 13 % 17) as f32 * 0.37 - 2.5).to_bits()),
                        })
                        .collect();
                    let out: Vec<AtomicU32> = (0..out_len).map(|_| AtomicU32::new(7)).collect();
                    let views = if aliased {
                        [CpuBuffer::new(&grid), CpuBuffer::new(&grid)]
                    } else {
                        [CpuBuffer::new(&grid), CpuBuffer::new(&out)]
                    };
                    let scalars = [width as u32, height as u32, 0.23f32.to_bits()];
                    let io = KernelIo::new(&views, &scalars, ExecutionMode::Checked);
                    let cube_count = [
                        (width as u32).div_ceil(STENCIL_TILE),
                        (height as u32).div_ceil(STENCIL_TILE),
                        1,
                    ];
                    crate::kernel::run_every_cube(kernel, cube_count, &io);
                    let bits = |words: &[AtomicU32]| -> Vec<u32> {
                        words.iter().map(|w| w.load(Ordering::Relaxed)).collect()
                    };
                    (bits(&grid), bits(&out))
                };
                assert_eq!(
                    run(&STENCIL),
                    run(&stencil2d_generated),
                    "{width}x{height}, grid {grid_len}, out {out_len}, aliased {aliased}"
                );
            }
        }
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

//! The kernel library shipped with gpuworld: used by tests, benches, autotune and the demo.
//! Every kernel works on `f32` elements. Each definition here carries its CPU source; the wgpu
//! and cuda backends supply their WGSL and CUDA C for these kernels themselves
//! (`Backend::library_source`), next to their code.

pub mod matmul;
pub mod reduce;

use crate::kernel::{CpuSource, KernelDef, Signature};

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

/// The library's simple kernels, each one `#[kernel]` source for every backend (issue 32):
/// `out[i] = value` and the like, checked per element, 256 units per cube; the stencil in
/// 16×16 tiles.
mod generated {
    use crate::kernel;

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

    /// One explicit heat-diffusion step on a `width x height` grid with fixed borders:
    /// `out = u + alpha * (north + south + east + west - 4u)`. Launch one cube per 16x16 tile.
    #[kernel(crate = crate, id = "gpuworld.stencil2d", cube_dim = [16, 16, 1])]
    pub fn stencil2d(u: &[f32], out: &mut [f32], width: u32, height: u32, alpha: f32) {
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
}

pub use generated::{add as ADD, copy as COPY, fill as FILL, scale as SCALE, stencil2d as STENCIL};

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
    use std::sync::atomic::{AtomicU32, Ordering};

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

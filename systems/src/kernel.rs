//! Kernels: one definition with a stable id and a source per backend, plus the interface a CPU
//! source is written against (one call per cube, buffers read and written by element).

use crate::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

/// A kernel as the runtime launches it: a static definition.
pub type Kernel = &'static KernelDef;

/// Which kind of source a backend runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// A Rust function (cpu and sim backends).
    Cpu,
    /// WGSL text (wgpu backend).
    Wgsl,
    /// CUDA C text (cuda backend).
    Cuda,
}

/// A CPU kernel: called once per cube with the cube's position and the launch's buffers.
pub type CpuKernelFn = fn(&CubeContext, &KernelIo<'_>);

/// One kernel: its stable id, its shape and a source per backend.
pub struct KernelDef {
    /// Stable id, unique across the process (`"gpuworld.fill"`); caches are keyed by it.
    pub id: &'static str,
    /// Short human name used in logs and errors.
    pub name: &'static str,
    /// Units per cube along x, y, z.
    pub cube_dim: [u32; 3],
    /// Number of buffer bindings the kernel takes.
    pub buffers: usize,
    /// Number of 32-bit scalars the kernel takes.
    pub scalars: usize,
    /// Source for the cpu and sim backends.
    pub cpu: Option<CpuKernelFn>,
    /// Source for the wgpu backend.
    pub wgsl: Option<&'static str>,
    /// Source for the cuda backend.
    pub cuda: Option<&'static str>,
}

impl KernelDef {
    /// Whether the kernel has a source of the given kind.
    pub fn has_source(&self, kind: SourceKind) -> bool {
        match kind {
            SourceKind::Cpu => self.cpu.is_some(),
            SourceKind::Wgsl => self.wgsl.is_some(),
            SourceKind::Cuda => self.cuda.is_some(),
        }
    }

    /// Units per cube.
    pub fn units_per_cube(&self) -> u32 {
        self.cube_dim[0] * self.cube_dim[1] * self.cube_dim[2]
    }
}

impl fmt::Debug for KernelDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelDef")
            .field("id", &self.id)
            .field("cube_dim", &self.cube_dim)
            .field("buffers", &self.buffers)
            .field("scalars", &self.scalars)
            .finish_non_exhaustive()
    }
}

/// How many cubes a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CubeCount {
    /// A count known when launching.
    Static(u32, u32, u32),
    /// A count read on the device from a buffer holding three `u32`: x, y, z.
    Dynamic(crate::handle::Binding),
}

impl CubeCount {
    /// `x` cubes along one axis.
    pub fn new_1d(x: u32) -> CubeCount {
        CubeCount::Static(x, 1, 1)
    }

    /// `x * y` cubes on a grid.
    pub fn new_2d(x: u32, y: u32) -> CubeCount {
        CubeCount::Static(x, y, 1)
    }

    /// Enough cubes of `units_per_cube` to cover `elements` along one axis.
    pub fn covering(elements: u64, units_per_cube: u32) -> CubeCount {
        let cubes = elements.div_ceil(units_per_cube.max(1) as u64);
        CubeCount::Static(u32::try_from(cubes).unwrap_or(u32::MAX), 1, 1)
    }

    /// Enough `tile x tile` cubes to cover a `width x height` grid.
    pub fn covering_2d(width: u32, height: u32, tile: u32) -> CubeCount {
        let tile = tile.max(1);
        CubeCount::Static(width.div_ceil(tile), height.div_ceil(tile), 1)
    }

    /// Whether this count is statically known to run no cube at all.
    pub fn is_empty(&self) -> bool {
        matches!(self, CubeCount::Static(x, y, z) if *x == 0 || *y == 0 || *z == 0)
    }
}

/// Whether a launch checks every buffer access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutionMode {
    /// Out-of-bounds reads give zero and out-of-bounds writes are dropped.
    Checked,
    /// No checks: the caller promised every access is in bounds.
    Unchecked,
}

/// Where one cube sits in its launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubeContext {
    /// This cube's position.
    pub cube_pos: [u32; 3],
    /// The launch's cube count.
    pub cube_count: [u32; 3],
    /// Units per cube.
    pub cube_dim: [u32; 3],
}

impl CubeContext {
    /// The cube's position flattened to one index.
    pub fn cube_index(&self) -> u64 {
        let [x, y, z] = self.cube_pos.map(u64::from);
        let [cx, cy, _] = self.cube_count.map(u64::from);
        x + cx * (y + cy * z)
    }

    /// The global index of the first unit of this cube along x, for 1-D kernels.
    pub fn first_unit_1d(&self) -> u64 {
        self.cube_index() * u64::from(self.cube_dim[0] * self.cube_dim[1] * self.cube_dim[2])
    }

    /// Units per cube.
    pub fn units(&self) -> u64 {
        u64::from(self.cube_dim[0] * self.cube_dim[1] * self.cube_dim[2])
    }
}

/// A buffer binding as a CPU kernel sees it: the whole 4-byte words of a range of host memory,
/// borrowed from the memory that holds them (`HostMemory::view`), so it cannot outlive them.
#[derive(Clone, Copy, Debug)]
pub struct CpuBuffer<'a> {
    words: &'a [AtomicU32],
}

impl<'a> CpuBuffer<'a> {
    /// A view of `words`.
    pub fn new(words: &'a [AtomicU32]) -> CpuBuffer<'a> {
        CpuBuffer { words }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.words.len() * 4
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// The buffers and scalars of one launch, as CPU kernels access them.
pub struct KernelIo<'a> {
    buffers: &'a [CpuBuffer<'a>],
    scalars: &'a [u32],
    mode: ExecutionMode,
}

impl<'a> KernelIo<'a> {
    /// Bundles a launch's arguments.
    pub fn new(buffers: &'a [CpuBuffer<'a>], scalars: &'a [u32], mode: ExecutionMode) -> Self {
        KernelIo {
            buffers,
            scalars,
            mode,
        }
    }

    /// Number of 32-bit elements in buffer `buffer`.
    pub fn len32(&self, buffer: usize) -> usize {
        self.buffers[buffer].words.len()
    }

    fn word(&self, buffer: usize, index: usize) -> Option<&AtomicU32> {
        let word = self.buffers[buffer].words.get(index);
        // Unchecked launches promised to stay in bounds; on the host, breaking that promise is
        // a kernel panic (`Error::KernelPanic`) rather than an access outside the buffer.
        if word.is_none() && self.mode == ExecutionMode::Unchecked {
            panic!("element {index} of buffer {buffer} is out of bounds in an unchecked launch");
        }
        word
    }

    /// Reads element `index` of `buffer` as `u32`; out of bounds reads 0 in checked mode and
    /// panics in unchecked mode.
    pub fn load_u32(&self, buffer: usize, index: usize) -> u32 {
        self.word(buffer, index)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Writes element `index` of `buffer`; out of bounds is dropped in checked mode and panics
    /// in unchecked mode.
    pub fn store_u32(&self, buffer: usize, index: usize, value: u32) {
        if let Some(w) = self.word(buffer, index) {
            w.store(value, Ordering::Relaxed);
        }
    }

    /// Reads element `index` of `buffer` as `f32`.
    pub fn load_f32(&self, buffer: usize, index: usize) -> f32 {
        f32::from_bits(self.load_u32(buffer, index))
    }

    /// Writes element `index` of `buffer` as `f32`.
    pub fn store_f32(&self, buffer: usize, index: usize, value: f32) {
        self.store_u32(buffer, index, value.to_bits());
    }

    /// Scalar `index` as `u32`.
    pub fn scalar_u32(&self, index: usize) -> u32 {
        self.scalars.get(index).copied().unwrap_or(0)
    }

    /// Scalar `index` as `f32`.
    pub fn scalar_f32(&self, index: usize) -> f32 {
        f32::from_bits(self.scalar_u32(index))
    }
}

/// The text of a caught panic.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "kernel panicked with a non-string payload".to_string()
    }
}

/// Checks a launch's shape against the kernel's declaration.
pub fn validate_arity(kernel: &KernelDef, buffers: usize, scalars: usize) -> Result<(), Error> {
    if buffers != kernel.buffers {
        return Err(Error::BindingCount {
            kernel: kernel.name,
            what: "buffer bindings",
            expected: kernel.buffers,
            got: buffers,
        });
    }
    if scalars != kernel.scalars {
        return Err(Error::BindingCount {
            kernel: kernel.name,
            what: "scalars",
            expected: kernel.scalars,
            got: scalars,
        });
    }
    Ok(())
}

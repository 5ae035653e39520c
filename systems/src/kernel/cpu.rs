//! The CPU side of kernels: the source type the cpu and sim backends run, and the interface it is
//! written against (one call per cube, buffers read and written by element).

use super::KernelSource;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// A CPU kernel: called once per cube with the cube's position and the launch's buffers.
pub type CpuKernelFn = fn(&CubeContext, &KernelIo<'_>);

/// A kernel's source for the cpu and sim backends: a Rust function called once per cube.
#[derive(Clone, Copy, Debug)]
pub struct CpuSource(pub CpuKernelFn);

impl KernelSource for CpuSource {}

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
        self.cube_index() * self.units()
    }

    /// Units per cube.
    pub fn units(&self) -> u64 {
        u64::from(self.cube_dim[0] * self.cube_dim[1] * self.cube_dim[2])
    }

    /// The global indices of this cube's units below `len`, for 1-D kernels.
    pub fn units_1d(&self, len: usize) -> Range<usize> {
        let start = self.first_unit_1d().min(len as u64);
        let end = (start + self.units()).min(len as u64);
        start as usize..end as usize
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

    /// The words viewed, for host code sharing the memory with kernels (interop).
    pub fn words(&self) -> &'a [AtomicU32] {
        self.words
    }
}

/// The buffers and scalars of one launch, as CPU kernels access them.
pub struct KernelIo<'a> {
    buffers: &'a [CpuBuffer<'a>],
    scalars: &'a [u32],
    mode: super::ExecutionMode,
}

impl<'a> KernelIo<'a> {
    /// Bundles a launch's arguments.
    pub fn new(
        buffers: &'a [CpuBuffer<'a>],
        scalars: &'a [u32],
        mode: super::ExecutionMode,
    ) -> Self {
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
        if word.is_none() && self.mode == super::ExecutionMode::Unchecked {
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

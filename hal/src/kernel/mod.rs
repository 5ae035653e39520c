//! Kernels: one definition — a stable id, a binding signature and an open set of sources, one
//! per backend, each found by its type — plus launch shapes and the arity check.
//!
//! The three source types of gpuworld's conventions live here — [`CpuSource`] (cpu and sim),
//! [`WgslSource`] (wgpu) and [`CudaSource`] (cuda) — so that a kernel can carry all three
//! whatever backends a build enables (`#[gpuworld::kernel]` emits all three); each backend names
//! its own as [`Kernels::Source`](crate::backend::Kernels::Source) and owns what the text means
//! (its declarations, prelude and compiler). A backend may also define a source type of its own.

mod atomic;
mod cpu;
#[cfg(test)]
pub(crate) use cpu::run_every_cube;
mod elem;
pub mod exact_math;
pub mod limits;
pub mod ops;
// The race detector runs only in the host backends' launches (`host_launch`, hal's `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub(crate) mod race;
mod racing;
pub mod transcendental;

pub use atomic::AtomicOp;
pub use cpu::{
    BufferIo, CpuBuffer, CpuKernelFn, CpuSource, CubeContext, KernelIo, ReadOnlyStore,
    panic_message,
};

pub use elem::Elem;
/// What a checked launch's race report names ([`ExecutionError::DataRace`](crate::error::ExecutionError::DataRace)).
pub use racing::{AccessKind, RacingAccess};

use crate::error::LaunchError;
use std::any::Any;
use std::fmt;

/// A kernel as the runtime launches it: a static definition.
pub type Kernel = &'static KernelDef;

/// One backend's source of a kernel. Each backend defines its own type; a kernel lists sources
/// of any types and a backend finds its own by type ([`KernelDef::source`]).
pub trait KernelSource: Any + Send + Sync {}

/// A kernel's WGSL for the wgpu backend: the entry point `main`, with
/// `@compute @workgroup_size` equal to the signature's cube dim, and its helpers. The bindings
/// are declared by the backend from the signature: buffer `<name>: array<f32 | u32>` at
/// `@binding(i)` (`var<storage, read>` when read-only), scalars as `scalars.<name>`.
#[derive(Clone, Copy, Debug)]
pub struct WgslSource(pub &'static str);

impl KernelSource for WgslSource {}

/// A kernel's CUDA C for the cuda backend: `extern "C" __global__ void <kernel name>(GW_PARAMS)`
/// and its helpers, following the convention of gpuworld-cuda's `cuda_c` module (parameters
/// generated from the signature, `GW_FOR_EACH_CUBE`, `GW_IN_BOUNDS`).
#[derive(Clone, Copy, Debug)]
pub struct CudaSource(pub &'static str);

impl KernelSource for CudaSource {}

/// How a kernel accesses a buffer binding: what the runtime orders it after (a reader waits for
/// the last writer on another stream; a writer waits for every other stream's readers and
/// writers) and what the generated declarations allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only loads: `var<storage, read>` in WGSL, a `const` pointer in CUDA, and a store on the
    /// CPU is a fault of the launch
    /// ([`ExecutionError::ReadOnlyStore`](crate::error::ExecutionError::ReadOnlyStore)).
    Read,
    /// Stores (loads are allowed, but see nothing the runtime ordered): ordered as a write.
    Write,
    /// Loads and stores.
    ReadWrite,
    /// Atomic operations on `u32` or `i32` elements (relaxed): ordered as a write; WGSL declares
    /// the buffer `array<atomic<u32 | i32>>` (so every access goes through `atomicLoad`,
    /// `atomicAdd`, ...), CUDA a plain pointer for `atomicAdd`, ....
    Atomic,
}

impl Access {
    /// Whether a launch may store to a binding of this access.
    pub const fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }
}

/// One named binding of a signature: a buffer (its element type and access) or a scalar (its
/// type; a scalar's access is always [`Access::Read`] in effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// The name the sources use for it (an identifier in every source language).
    pub name: &'static str,
    /// Its element or scalar type.
    pub elem: Elem,
    /// How the kernel accesses it, when it is a buffer.
    pub access: Access,
}

impl Param {
    /// An `f32` buffer (read and written) or scalar named `name`.
    pub const fn f32(name: &'static str) -> Param {
        Param {
            name,
            elem: Elem::F32,
            access: Access::ReadWrite,
        }
    }

    /// A `u32` buffer (read and written) or scalar named `name`.
    pub const fn u32(name: &'static str) -> Param {
        Param {
            name,
            elem: Elem::U32,
            access: Access::ReadWrite,
        }
    }

    /// An `i32` buffer (read and written) or scalar named `name`.
    pub const fn i32(name: &'static str) -> Param {
        Param {
            name,
            elem: Elem::I32,
            access: Access::ReadWrite,
        }
    }

    /// This buffer, only read by the kernel: `Param::f32("x").read_only()`.
    pub const fn read_only(self) -> Param {
        Param {
            access: Access::Read,
            ..self
        }
    }

    /// This buffer, accessed through atomic operations only: `Param::u32("counts").atomic()`.
    pub const fn atomic(self) -> Param {
        Param {
            access: Access::Atomic,
            ..self
        }
    }

    /// This buffer, only written by the kernel: `Param::f32("out").write_only()`.
    pub const fn write_only(self) -> Param {
        Param {
            access: Access::Write,
            ..self
        }
    }
}

/// What a launch of a kernel binds, in order, and the units of one cube: the one description
/// every backend turns into the declarations its language needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The buffer bindings, in launch order.
    pub buffers: &'static [Param],
    /// The 32-bit scalars, in launch order.
    pub scalars: &'static [Param],
    /// Units per cube along x, y, z.
    pub cube_dim: [u32; 3],
}

/// One kernel: its stable id, its binding signature and its sources, at most one per backend.
///
/// # Binding convention
///
/// A launch binds the signature's buffers, then its scalars, in order; the client refuses a scalar
/// of another type than declared ([`LaunchError::ScalarType`]) and a buffer that is not whole
/// elements ([`LaunchError::BufferElementSize`]). Each backend generates the declarations from the
/// signature, so a source holds only code:
///
/// - **CPU** ([`CpuSource`], cpu and sim backends): called once per cube; buffer `i` and scalar
///   `j` are read by position through [`KernelIo`], the cube's position is in [`CubeContext`];
///   a store to a read-only buffer stops the launch
///   ([`ExecutionError::ReadOnlyStore`](crate::error::ExecutionError::ReadOnlyStore)).
/// - **WGSL** (`WgslSource`, wgpu backend): buffer `i` is
///   `@group(0) @binding(i) var<storage, read_write | read> <name>: array<f32 | u32>` (`read`
///   for a read-only [`Param`]), bound to exactly
///   the launch's byte range, so `arrayLength` is its length in 32-bit words; the scalars are
///   the fields of `struct Scalars` (padded to 16 bytes), bound as
///   `var<uniform> scalars: Scalars` at `@binding(<number of buffers>)` and read as
///   `scalars.<name>`. The source defines the entry point `main` with a
///   `@compute @workgroup_size` equal to `cube_dim` (checked when the kernel is compiled). A
///   cube is a workgroup; 1-D kernels flatten the workgroup id as [`CubeContext::cube_index`]
///   does (`x + count_x * (y + count_y * z)`). Checked mode must never access outside
///   `arrayLength`, so every library kernel checks its indices in both modes.
/// - **CUDA** (`CudaSource`, cuda backend): the source defines
///   `extern "C" __global__ void <name>(GW_PARAMS)`, where `GW_PARAMS` is generated: a pointer
///   `<name>` (`const` when read-only) and its length in words `<name>_len` per buffer, then each
///   scalar with its type;
///   the rest of the convention is documented on `CudaSource`.
///
/// A backend asked to run a kernel without a source for it gets
/// [`LaunchError::MissingKernelSource`] from the client call.
pub struct KernelDef {
    /// Stable id, unique across the process (`"gpuworld.fill"`); caches are keyed by it.
    pub id: &'static str,
    /// Short human name used in logs and errors (and as the CUDA function's name).
    pub name: &'static str,
    /// What a launch binds and the units of one cube.
    pub signature: Signature,
    /// The kernel's sources, at most one of each type; a backend's library may add its own.
    pub sources: &'static [&'static dyn KernelSource],
}

impl KernelDef {
    /// The kernel's source of type `S`, if it has one.
    pub fn source<S: KernelSource>(&self) -> Option<&'static S> {
        self.sources
            .iter()
            .find_map(|source| (*source as &dyn Any).downcast_ref::<S>())
    }
}

impl fmt::Debug for KernelDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelDef")
            .field("id", &self.id)
            .field("signature", &self.signature)
            .field("sources", &self.sources.len())
            .finish()
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

/// The [`ExecutionMode`] a queued launch (`gpuworld_systems::inbox::Launch`) asks for: checked,
/// or unchecked only where `unsafe` code vouched for every access. Anyone may queue commands
/// (`Runtime::inbox`), so the unchecked mode is the one thing of a launch safe code cannot ask
/// for.
///
/// ```
/// use gpuworld_hal::kernel::{ExecutionMode, LaunchMode};
///
/// assert_eq!(LaunchMode::CHECKED.execution_mode(), ExecutionMode::Checked);
/// // SAFETY: no launch goes with this mode.
/// let unchecked = unsafe { LaunchMode::unchecked() };
/// assert_eq!(unchecked.execution_mode(), ExecutionMode::Unchecked);
/// ```
///
/// Safe code cannot make an unchecked one, neither through the constructor:
///
/// ```compile_fail,E0133
/// let unchecked = gpuworld_hal::kernel::LaunchMode::unchecked();
/// ```
///
/// nor from the mode it wraps:
///
/// ```compile_fail,E0423
/// use gpuworld_hal::kernel::{ExecutionMode, LaunchMode};
/// let unchecked = LaunchMode(ExecutionMode::Unchecked);
/// ```
///
/// nor by copying one that `unsafe` code made for another launch (a `CommandTap`
/// (`gpuworld_systems::inbox`) sees commands by reference, and a launch's parts are read-only
/// once made, so a clone of an unchecked launch can only be queued again as it is):
///
/// ```compile_fail,E0507
/// use gpuworld_hal::kernel::LaunchMode;
/// // A command's mode, as a tap sees it: by reference.
/// fn reuse(seen: &LaunchMode) {
///     let owned: LaunchMode = *seen;
/// }
/// ```
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LaunchMode(ExecutionMode);

impl LaunchMode {
    /// Every buffer access bound-checked: out-of-bounds loads give zero, stores are dropped.
    pub const CHECKED: LaunchMode = LaunchMode(ExecutionMode::Checked);

    /// No bound checks.
    ///
    /// # Safety
    /// The launch queued with this mode must access only bytes inside its bindings, for its
    /// cube count and scalars: a backend runs it without checks, and on a GPU an access out of
    /// bounds reads or writes whatever memory is there (another handle's bytes, or a fault). The
    /// promise holds for every run of the launch as it is: a graph that captured it replays it,
    /// and a clone of its `Op` (`gpuworld_systems::inbox::Op`) may be queued again.
    pub const unsafe fn unchecked() -> LaunchMode {
        LaunchMode(ExecutionMode::Unchecked)
    }

    /// The mode the backend runs the launch in.
    pub const fn execution_mode(&self) -> ExecutionMode {
        self.0
    }
}

/// Checks a launch's shape against the kernel's declaration.
pub fn validate_arity(
    kernel: &KernelDef,
    buffers: usize,
    scalars: usize,
) -> Result<(), LaunchError> {
    let signature = &kernel.signature;
    if buffers != signature.buffers.len() {
        return Err(LaunchError::BindingCount {
            kernel: kernel.name,
            what: "buffer binding",
            expected: signature.buffers.len(),
            got: buffers,
        });
    }
    if scalars != signature.scalars.len() {
        return Err(LaunchError::BindingCount {
            kernel: kernel.name,
            what: "scalar",
            expected: signature.scalars.len(),
            got: scalars,
        });
    }
    Ok(())
}

/// Checks a launch's bindings against the kernel's declaration: their counts and each scalar's
/// type.
pub fn validate_launch(
    kernel: &KernelDef,
    buffers: usize,
    scalars: &[Elem],
) -> Result<(), LaunchError> {
    validate_arity(kernel, buffers, scalars.len())?;
    for (param, &got) in kernel.signature.scalars.iter().zip(scalars) {
        if param.elem != got {
            return Err(LaunchError::ScalarType {
                kernel: kernel.name,
                param: param.name,
                declared: param.elem,
                got,
            });
        }
    }
    Ok(())
}

/// Checks that buffer `index` of a launch, `bytes` long, is a whole number of the elements the
/// kernel declares for it.
pub fn validate_buffer_size(
    kernel: &KernelDef,
    index: usize,
    bytes: u64,
) -> Result<(), LaunchError> {
    match kernel.signature.buffers.get(index) {
        Some(param) if !bytes.is_multiple_of(param.elem.size()) => {
            Err(LaunchError::BufferElementSize {
                kernel: kernel.name,
                param: param.name,
                elem: param.elem,
                bytes,
            })
        }
        _ => Ok(()),
    }
}

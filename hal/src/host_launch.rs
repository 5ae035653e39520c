//! Running a launch on host memory, shared by the cpu and sim backends: the kernel's CPU source,
//! the cube count (read from memory when dynamic), the buffers' views, and a kernel panic turned
//! into a stream error.
//! The backends differ only in how they walk the cubes (in order, or spread over threads).

use crate::backend::{LaunchCount, Region};
use crate::error::{Error, ExecutionError, LaunchError};
use crate::host_memory::HostMemory;
use crate::ids::StreamId;
use crate::kernel::limits::{
    HOST_MAX_CUBE_COUNT, HOST_MAX_CUBE_DIM, HOST_MAX_UNITS_PER_CUBE, check_cube_count,
    check_cube_dim,
};
use crate::kernel::race::RaceShadow;
use crate::kernel::{
    Access, CpuKernelFn, CpuSource, CubeContext, ExecutionMode, Kernel, KernelIo, ReadOnlyStore,
    panic_message,
};
use smallvec::SmallVec;

/// A launch ready to run: its CPU source, cube count and buffer views.
#[derive(Debug)]
pub struct HostLaunch<'a> {
    /// The kernel.
    pub kernel: Kernel,
    /// Its CPU source.
    pub source: CpuKernelFn,
    /// Its cube count.
    pub count: [u32; 3],
    /// Its buffers and scalars.
    pub io: KernelIo<'a>,
}

impl HostLaunch<'_> {
    /// Number of cubes.
    pub fn cubes(&self) -> u64 {
        self.count.iter().map(|&c| u64::from(c)).product()
    }

    /// Runs cube `index` of the launch (x fastest, then y, then z).
    pub fn run_cube(&self, index: u64) {
        let [cx, cy, _] = self.count.map(u64::from);
        let ctx = CubeContext {
            cube_pos: [
                (index % cx) as u32,
                ((index / cx) % cy) as u32,
                (index / cx / cy) as u32,
            ],
            cube_count: self.count,
            cube_dim: self.kernel.signature.cube_dim,
        };
        if self.io.races().is_some() {
            RaceShadow::enter_cube(index);
        }
        (self.source)(&ctx, &self.io);
    }

    /// Runs every cube in order on the calling thread.
    pub fn run_in_order(&self) {
        (0..self.cubes()).for_each(|cube| self.run_cube(cube));
    }
}

/// Prepares a launch on `memory` and runs it with `walk`, which must call
/// [`HostLaunch::run_cube`] once for every cube.
#[expect(
    clippy::too_many_arguments,
    reason = "the launch's own arguments, as Queue::launch receives them"
)]
pub fn run_on_host(
    memory: &HostMemory,
    backend: &'static str,
    stream: StreamId,
    kernel: Kernel,
    count: LaunchCount,
    buffers: &[Region],
    scalars: &[u32],
    mode: ExecutionMode,
    walk: impl FnOnce(&HostLaunch<'_>),
) -> Result<(), Error> {
    // The client refuses kernels without a CPU source; only a direct backend call gets here.
    let CpuSource(source) =
        *kernel
            .source::<CpuSource>()
            .ok_or(Error::Launch(LaunchError::MissingKernelSource {
                kernel: kernel.name,
                backend,
            }))?;
    let dynamic = matches!(count, LaunchCount::Dynamic(_));
    let count = resolve_count(memory, count)
        .ok_or_else(|| Error::device_fault(stream, "dynamic cube count in freed memory"))?;
    // The client refused static counts and cube dims over these limits; a dynamic count is
    // known only now, and a direct backend call was never checked.
    check_cube_dim(kernel, HOST_MAX_CUBE_DIM, HOST_MAX_UNITS_PER_CUBE)?;
    check_cube_count(kernel, count, HOST_MAX_CUBE_COUNT, dynamic)?;
    let params = kernel.signature.buffers;
    let views = buffers
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let view = memory.view(*r)?;
            let read_only = params.get(i).is_some_and(|p| p.access == Access::Read);
            Some(if read_only { view.read_only() } else { view })
        })
        .collect::<Option<SmallVec<[_; 4]>>>()
        .ok_or_else(|| Error::device_fault(stream, "kernel bound to freed memory"))?;
    let dim = kernel.signature.cube_dim;
    let units: u64 = dim.iter().map(|&d| u64::from(d)).product();
    let shadow = tracks_races(backend, mode)
        .then(|| RaceShadow::new(views.iter().map(|view| view.len() / 4), units));
    let io = KernelIo::new(&views, scalars, mode);
    let io = match &shadow {
        Some(shadow) => io.with_races(shadow, units),
        None => io,
    };
    let launch = HostLaunch {
        kernel,
        source,
        count,
        io,
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| walk(&launch)));
    if let (Ok(()), Some(race)) = (&ran, shadow.as_ref().and_then(RaceShadow::race)) {
        return Err(Error::Execution(ExecutionError::DataRace {
            kernel: kernel.name,
            param: params.get(race.buffer).map_or("?", |p| p.name),
            element: race.element,
            first: race.first.0.describe(race.first.1, count, dim),
            second: race.second.0.describe(race.second.1, count, dim),
            stream,
        }));
    }
    ran.map_err(|payload| match payload.downcast_ref::<ReadOnlyStore>() {
        Some(store) => Error::Execution(ExecutionError::ReadOnlyStore {
            kernel: kernel.name,
            param: params.get(store.buffer).map_or("?", |p| p.name),
            stream,
        }),
        None => Error::Execution(ExecutionError::KernelPanic {
            kernel: kernel.name,
            stream,
            message: panic_message(payload).into(),
        }),
    })
}

/// Whether a launch on `backend` in `mode` runs under the race detector: checked launches on
/// the sim (`"sim"`, its `Kernels::NAME`; named here, since the sim imports this module)
/// always, on the cpu backend in builds with debug assertions (the detector's shadow costs a
/// word per element and a compare-and-swap per access, which a release build's users did not
/// ask for).
fn tracks_races(backend: &str, mode: ExecutionMode) -> bool {
    mode == ExecutionMode::Checked && (backend == "sim" || cfg!(debug_assertions))
}

/// The cube count of a launch, reading a dynamic count from memory.
pub fn resolve_count(memory: &HostMemory, count: LaunchCount) -> Option<[u32; 3]> {
    match count {
        LaunchCount::Static(c) => Some(c),
        LaunchCount::Dynamic(region) => {
            let bytes = memory.read(Region {
                size: 12.min(region.size),
                ..region
            })?;
            let word = |i: usize| {
                bytes
                    .get(i * 4..i * 4 + 4)
                    .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            };
            Some([word(0), word(1), word(2)])
        }
    }
}

#![doc = include_str!("../README.md")]

/// The runtime's side of the client: public for the `gpuworld` crate, documented only with the
/// `internals` feature (no stability promise).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod arriving;
mod binding;
pub mod graph;
mod handle;
pub mod kernel;
/// The backend interface and what backends share, at the paths users knew: documented in
/// [`gpuworld_hal`], whose public API they are.
#[doc(hidden)]
pub use gpuworld_hal::{
    backend, bytes, cross_device, error, ids, library, native, open, staging, usage,
};
#[cfg(test)]
mod import_graph;
/// The runtime's side of the client: public for the `gpuworld` crate, documented only with the
/// `internals` feature (no stability promise).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod inbox;
pub mod memory;
/// The runtime's side of the client: public for the `gpuworld` crate, documented only with the
/// `internals` feature (no stability promise).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod outbox;
/// The runtime's side of the client: public for the `gpuworld` crate, documented only with the
/// `internals` feature (no stability promise).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod published;
mod runtime;
#[cfg(test)]
mod source_sizes;
/// The unit tests' device: the sim backend (`backends/sim`), a dev-dependency.
#[cfg(test)]
use gpuworld_sim as sim;
pub mod snapshot;
/// The tick's seven stages and the state each owns: public only with the `internals` feature
/// (the workspace's fuzzer and tools read it); what tuners exchange with the tune stage is
/// re-exported at [`tune`].
#[cfg(feature = "internals")]
pub mod stages;
#[cfg(not(feature = "internals"))]
pub(crate) mod stages;
/// What tuners and the tune stage exchange: results, the cache of winners, candidates' outcomes.
pub mod tune {
    /// The queue of tuners' messages to the tune stage: the client's plumbing, documented only
    /// with the `internals` feature.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub use crate::stages::tune::TuneResults;
    pub use crate::stages::tune::{
        CandidateOutcome, TuneCache, TuneEntry, TuneMessage, TuneResult,
    };
}
mod sync;
pub mod trace;
/// The world's shared components and resources: public only with the `internals` feature;
/// [`RuntimeConfig`] and [`SchedulingStrategy`] are re-exported at the root.
#[cfg(feature = "internals")]
pub mod world;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)] // fields only the internals' users (tests, snapshots) read
pub(crate) mod world;

pub use backend::{Backend, DeviceProperties};
pub use binding::{Binding, CubeCount};
pub use bytes::HostBytes;
pub use error::{Error, ErrorKind, Result};
/// `#[kernel]`: one Rust kernel compiled to every backend's source (see `gpuworld_macros`).
pub use gpuworld_macros::kernel;
/// `#[kernels] mod m { .. }` and `#[func]`: kernels that use their module's constants, helper
/// functions and `#[repr(C)]` structs (see `gpuworld_macros`).
pub use gpuworld_macros::{func, kernels};
pub use handle::Handle;
pub use ids::{HandleId, RuntimeId, StreamId};
pub use kernel::{
    Access, CpuSource, Elem, ExecutionMode, Kernel, KernelDef, LaunchMode, Param, Signature,
};
pub use open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
pub use runtime::{HostRecords, Runtime, StreamState};
pub use usage::MemoryUsage;
pub use world::{RuntimeConfig, SchedulingStrategy, Stats};

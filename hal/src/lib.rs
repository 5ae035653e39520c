#![doc = include_str!("../README.md")]

pub mod backend;
pub mod bytes;
pub mod cross_device;
pub mod error;
pub mod graph;
pub mod host_launch;
pub mod host_memory;
pub mod host_ops;
pub mod host_timing;
pub mod ids;
pub mod kernel;
pub mod library;
pub mod native;
pub mod open;
pub mod staging;
pub mod usage;

/// `#[kernel]` for the library's kernels (`library`), which name this crate's paths.
pub(crate) use gpuworld_macros::kernel;

pub use backend::{Backend, DeviceProperties};
pub use bytes::HostBytes;
pub use error::{Error, ErrorKind, Result};
pub use ids::{HandleId, RuntimeId, StreamId};
pub use kernel::{
    Access, CpuSource, CudaSource, Elem, ExecutionMode, Kernel, KernelDef, LaunchMode, Param,
    Signature, WgslSource,
};
pub use open::{
    BackendSettings, DeviceId, DeviceInfo, OpenBackend, SchedulingDefaults, SchedulingStrategy,
};
pub use usage::MemoryUsage;

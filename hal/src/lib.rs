#![doc = include_str!("../README.md")]

pub mod backend;
/// [`HostBytes`](backend::HostBytes) and its memory's home: public at [`backend`], their path.
#[doc(hidden)]
pub mod bytes;
pub mod cross_device;
pub mod error;
pub mod graph;
/// The host backends' (cpu, sim) shared machinery: public only with the `internals` feature,
/// which those backends turn on.
#[cfg(feature = "internals")]
pub mod host_launch;
/// Host memory for the host backends (cpu, sim): public only with the `internals` feature.
#[cfg(feature = "internals")]
pub mod host_memory;
/// The host backends' operations and completions: public only with the `internals` feature.
#[cfg(feature = "internals")]
pub mod host_ops;
/// The host backends' operation times: public only with the `internals` feature.
#[cfg(feature = "internals")]
pub mod host_timing;
pub mod ids;
pub mod kernel;
pub mod library;
/// [`NativeOp`](backend::NativeOp) and [`NativeWork`](backend::NativeWork): public at
/// [`backend`], their path.
#[doc(hidden)]
pub mod native;
pub mod open;
/// Staging memory: what backends implement is public at [`backend`]; the buffer cache and the
/// parallel copy the workspace's crates share are documented only with the `internals` feature.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod staging;
pub mod usage;

/// `#[kernel]` for the library's kernels (`library`), which name this crate's paths.
pub(crate) use gpuworld_macros::kernel;

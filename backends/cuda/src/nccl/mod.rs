//! NCCL for collectives between CUDA devices: communicators over a group of ordinals, and the
//! collective calls a runtime's task enqueues on its stream (`Queue::run_native`).
//!
//! The types are cudarc's (`nccl` feature); the functions are looked up here in
//! `libnccl.so.2`, loaded at run time: cudarc's own loader looks for `libnccl.so` and other
//! names but not `libnccl.so.2`, the only name NCCL's Python wheel (`nvidia-nccl-cu13`) ships,
//! and it panics when it finds none. Without the library every entry point returns
//! `DeviceError::BackendUnavailable` with the reason.

mod clique;
mod comms;
mod library;
mod processes;
mod run;

pub(crate) use clique::KnownClique;
pub(crate) use comms::as_nccl_call;
pub use comms::{NcclComm, NcclGroup, communicators};
pub use library::nccl;
pub use processes::{NcclProcesses, grouped, process_communicator};

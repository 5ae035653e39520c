//! The contract between the tick stages and a device: storage, streams, work and events.
//! Backends are thin; everything the runtime decides (ordering, reuse, errors) happens above it.
//!
//! The interface is split by role ([`Kernels`], [`Memory`], [`Queue`], [`Completion`],
//! [`DeviceTiming`], [`CrossDevice`]); [`Backend`] is their sum plus the device itself, and its
//! [`Capabilities`] say which optional parts a backend has.

mod capabilities;
mod roles;
mod types;

pub use crate::bytes::{HostBytes, HostMemoryHome};
pub use crate::native::{NativeOp, NativeWork};
pub use crate::staging::{DEFAULT_MAX_FREE_HEAP_STAGING, HeapStaging, StagingAllocator};
pub use capabilities::Capabilities;
pub use roles::{Completion, CrossDevice, DeviceTiming, Kernels, Memory, ProgressWatch, Queue};
pub use types::{
    AllocError, DeviceEvent, DeviceProperties, DeviceStream, LaunchCount, MemoryLayout, OpClock,
    OpKind, OpTime, ReadTicket, Region, StorageId,
};

/// A device: the sum of the roles, plus what is the device itself (its properties and
/// capabilities, its index, the tick's bounds, the lock over opening and closing it).
///
/// Calls never block, except [`Completion::wait_for_progress`]: completion is noticed by
/// [`Completion::poll`] and the `*_done`/`take_*` queries.
pub trait Backend: Kernels + Memory + Queue + Completion + DeviceTiming + CrossDevice {
    /// The device's properties.
    fn properties(&self) -> DeviceProperties;
    /// The optional parts of the interface this backend has; read by the runtime before it
    /// calls them, the same for the backend's whole life.
    fn capabilities(&self) -> Capabilities;
    /// This device's index among its backend's devices (a cpu device of
    /// `CpuBackend::with_devices`, a wgpu adapter, a CUDA ordinal); 0 by default.
    fn device_index(&self) -> u32 {
        0
    }
    /// Called first in every tick with the tick's number.
    fn begin_tick(&mut self, _tick: u64) {}
    /// Called last in every tick, after every stage: a backend that holds back work for its
    /// own threads during a tick (the cpu backend's stream workers) starts it here at the latest.
    fn end_tick(&mut self) {}
    /// A process-wide lock held while a device of this backend is opened and while a runtime
    /// over it is torn down, for drivers that deadlock when devices are created and destroyed
    /// concurrently (NVIDIA's Vulkan driver); `None` by default.
    fn lifecycle_lock() -> Option<&'static parking_lot::Mutex<()>>
    where
        Self: Sized,
    {
        None
    }
}

/// A backend whose runtime hands it out mutably to any caller (`Runtime::sim_mut`), not only
/// behind the `internals` feature: the sim, whose log and fault plan are how tests drive it.
pub trait TestDevice: Backend {}

/// A backend that hands out the memory behind a binding in its own terms, for interop
/// (`ComputeClient::get_resource`): host words, a wgpu buffer, a CUDA device pointer.
pub trait NativeResource: Backend {
    /// The backend's own view of a region of its memory, borrowing the backend.
    type Resource<'a>;
    /// `region`'s memory; `None` where the backend cannot give it (freed storage, host words
    /// of a region that does not start on a word).
    fn resource(&self, region: Region) -> Option<Self::Resource<'_>>;
}

//! What every clone of a client shares: the runtime behind its lock, the inbox, what calls read
//! without the lock (properties, capabilities, staging, the tune queue, what ticks publish), and the state of
//! the drivers and of the frames in flight.

use super::drivers::Drivers;
use super::frames::FrameFences;
use super::lock::RuntimeLock;
use gpuworld_systems::backend::{Capabilities, StagingAllocator};
use gpuworld_systems::inbox::Inbox;
use gpuworld_systems::published::Published;
use gpuworld_systems::tune::{TuneCache, TuneResults};
use gpuworld_systems::{Backend, DeviceProperties, Kernel, KernelDef, Runtime, RuntimeId};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// What every clone of one client shares.
pub(super) struct Shared<B: Backend> {
    pub(super) runtime: RuntimeLock<B>,
    pub(super) inbox: Arc<Inbox>,
    pub(super) id: RuntimeId,
    pub(super) properties: DeviceProperties,
    /// The optional parts of the backend interface the device has (the runtime's, read once).
    pub(super) capabilities: Capabilities,
    /// The backend's index of the device (`ComputeClient::device_id`).
    pub(super) device_index: u32,
    /// Where uploads take host memory, without the runtime lock (the backend's, fetched once).
    pub(super) staging: Arc<dyn StagingAllocator>,
    /// The tune stage's message queue and cache, shared so tuners never take the runtime lock.
    pub(super) tune_results: TuneResults,
    pub(super) tune_cache: TuneCache,
    /// What the runtime publishes at the end of every tick (memory usage), read without its lock.
    pub(super) published: Arc<Published>,
    /// Set for `Driver::Manual`, and when the device thread could not be started.
    pub(super) manual: AtomicBool,
    /// Which thread drives the runtime beside a device thread.
    pub(super) drivers: Drivers,
    /// The last kernel found to have a source for the backend: a launch of it again (the usual
    /// loop) skips the search of its sources.
    pub(super) last_kernel_with_source: AtomicPtr<KernelDef>,
    /// Fences of the frames ended and not yet seen finished (`frames.rs`).
    pub(super) frames: Mutex<FrameFences>,
    /// Alive while a user holds a client of this runtime (a graph's own clones do not count).
    pub(super) user_clients: std::sync::Weak<()>,
    /// What the device thread's panic said, once it panicked: every blocking call fails with it
    /// from then on (`drivers::device_thread`).
    pub(super) device_thread_panic: std::sync::OnceLock<Arc<str>>,
}

impl<B: Backend> Shared<B> {
    /// The shared state of a new client of `runtime`, which drains `inbox`; `manual` for
    /// `Driver::Manual`; `user` is held by every clone a user has.
    pub(super) fn new(
        runtime: Runtime<B>,
        inbox: Arc<Inbox>,
        manual: bool,
        user: &Arc<()>,
    ) -> Shared<B> {
        Shared {
            user_clients: Arc::downgrade(user),
            id: runtime.id(),
            properties: runtime.properties().clone(),
            capabilities: runtime.capabilities(),
            device_index: runtime.backend().device_index(),
            staging: runtime.backend().staging(),
            tune_results: runtime.tune_results(),
            tune_cache: runtime.tune_cache().clone(),
            published: runtime.published().clone(),
            runtime: RuntimeLock::new(runtime),
            inbox,
            manual: AtomicBool::new(manual),
            drivers: Drivers::default(),
            last_kernel_with_source: AtomicPtr::new(std::ptr::null_mut()),
            frames: Mutex::default(),
            device_thread_panic: std::sync::OnceLock::new(),
        }
    }

    /// Whether the backend has a source for `kernel` (a kernel's sources never change).
    pub(super) fn has_source(&self, kernel: Kernel) -> bool {
        let address = std::ptr::from_ref(kernel).cast_mut();
        if self.last_kernel_with_source.load(Ordering::Relaxed) == address {
            return true;
        }
        let found = B::source_for(kernel).is_some();
        if found {
            self.last_kernel_with_source
                .store(address, Ordering::Relaxed);
        }
        found
    }
}

//! Interop: `exclusive(f)` runs host code while the runtime is held, and `get_resource` hands
//! out the backend's own memory behind a binding (a CUDA device pointer, a wgpu buffer, host
//! words: each backend's [`NativeResource`]) for as long as the returned guard lives.

use super::ComputeClient;
use gpuworld_systems::backend::{NativeResource, Region};
use gpuworld_systems::{Backend, Binding, Result};

/// A binding's memory in the backend's own terms, valid while the guard lives: the runtime is
/// held, so no tick submits work and no memory is reclaimed or moved meanwhile.
pub struct ResourceGuard<'a, B: Backend> {
    runtime: super::lock::RuntimeGuard<'a, B>,
    region: Region,
}

impl<B: Backend> std::fmt::Debug for ResourceGuard<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceGuard")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> ResourceGuard<'_, B> {
    /// The backend, for its own interop methods.
    pub fn backend(&self) -> &B {
        self.runtime.backend()
    }

    /// The binding's bytes in the backend's buffer numbering.
    pub fn region(&self) -> Region {
        self.region
    }
}

impl<B: NativeResource> ResourceGuard<'_, B> {
    /// The binding's memory in the backend's own terms ([`NativeResource::Resource`]): host
    /// words on cpu, the buffer holding it on wgpu (which starts at [`ResourceGuard::region`]'s
    /// offset), the device pointer of its first byte on CUDA; `None` where the backend cannot
    /// give it (host words of a binding that does not start on a word).
    pub fn resource(&self) -> Option<B::Resource<'_>> {
        self.backend().resource(self.region)
    }
}

impl<B: Backend> ComputeClient<B> {
    /// Runs `f` with this client's stream synced and the runtime held: no tick runs, so no work
    /// of any stream is submitted, until `f` returns (clients may still enqueue; their commands
    /// wait). The stream's fault, if any, is returned instead of running `f`.
    pub fn exclusive<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        self.sync()?;
        let _held = self.shared.runtime.lock();
        Ok(f())
    }

    /// The backend's memory behind `binding` (see [`ResourceGuard`]), after this client's
    /// stream has run everything enqueued before: work of other streams that writes it must be
    /// synced by the caller. `BindingError::ReleasedHandle` for a released handle, the allocation's
    /// error for one that failed.
    pub fn get_resource(&self, binding: impl Into<Binding>) -> Result<ResourceGuard<'_, B>> {
        let binding = binding.into();
        binding.validate(self.shared.id)?;
        self.sync()?;
        let runtime = self.shared.runtime.lock();
        let region = runtime.binding_region(&binding)?;
        Ok(ResourceGuard { runtime, region })
    }
}

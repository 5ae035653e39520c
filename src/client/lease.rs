//! Render leases: a handle's buffer, offset and size handed to a renderer (or any wgpu code of
//! the user's) on the same device, with the writes queued before it submitted and its memory
//! pinned while the lease lives — the pin a captured graph takes (`Op::Pin`), so a released
//! handle's memory is neither reused nor moved by a compaction until the lease is dropped.
//!
//! Ordering is the device queue's: the lease submits this client's stream first, so a renderer
//! submission made after the lease sees every write enqueued before it; gpuworld work enqueued
//! after the renderer submitted its frame runs after that frame. Work enqueued while the lease is
//! held, before the frame is submitted, may be submitted first: submit the frame, then step.

use super::ComputeClient;
use gpuworld_sim::SimBackend;
use gpuworld_systems::backend::Region;
use gpuworld_systems::error::BindingError;
use gpuworld_systems::inbox::{Command, Inbox, Op, PinHolder};
use gpuworld_systems::{Backend, Binding, Error, HandleId, Result, RuntimeId};
use smallvec::SmallVec;
use std::sync::Arc;

/// A backend whose memory can be leased: what a lease holds of the buffer behind a region, kept
/// alive by the lease itself (a wgpu buffer is a counted handle), so a lease outliving its
/// runtime stays safe.
pub trait Leasable: Backend {
    /// What a lease holds: the buffer the region lies in.
    type Buffer: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// The buffer holding `region`, or `None` where the backend has none for it.
    fn lease_buffer(&self, region: Region) -> Option<Self::Buffer>;
}

#[cfg(feature = "wgpu")]
impl Leasable for crate::WgpuBackend {
    /// A clone of the wgpu buffer: usable in the user's passes on the same device.
    type Buffer = wgpu_types::Buffer;

    fn lease_buffer(&self, region: Region) -> Option<wgpu_types::Buffer> {
        gpuworld_systems::backend::NativeResource::resource(self, region).cloned()
    }
}

/// The sim has no memory: its lease holds the storage id, so tests see leases in snapshots.
impl Leasable for SimBackend {
    type Buffer = gpuworld_systems::backend::StorageId;

    fn lease_buffer(&self, region: Region) -> Option<Self::Buffer> {
        Some(region.storage)
    }
}

#[cfg(feature = "wgpu")]
use gpuworld_wgpu::wgpu as wgpu_types;

/// A handle's bytes lent to the user's own passes: bind [`Lease::buffer`] at [`Lease::offset`]
/// for [`Lease::size`] bytes. While it lives the memory stays where it is and is not given to
/// another handle, even after the handle is released; dropping it lets go of the pin.
#[must_use = "a lease pins the handle's memory until it is dropped"]
pub struct Lease<B: Leasable> {
    buffer: B::Buffer,
    offset: u64,
    size: u64,
    handle: HandleId,
    runtime: RuntimeId,
    inbox: Arc<Inbox>,
}

/// A lease of the wgpu backend: a `wgpu::Buffer`, offset and size.
#[cfg(feature = "wgpu")]
pub type RenderLease = Lease<crate::WgpuBackend>;

impl<B: Leasable> std::fmt::Debug for Lease<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("handle", &self.handle)
            .field("runtime", &self.runtime)
            .field("buffer", &self.buffer)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .finish()
    }
}

impl<B: Leasable> Lease<B> {
    /// The buffer holding the leased bytes, which start at [`Lease::offset`] in it.
    pub fn buffer(&self) -> &B::Buffer {
        &self.buffer
    }

    /// Where the leased bytes start in [`Lease::buffer`].
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes are leased.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The leased handle.
    pub fn handle(&self) -> HandleId {
        self.handle
    }

    /// The runtime the handle belongs to.
    pub fn runtime_id(&self) -> RuntimeId {
        self.runtime
    }
}

#[cfg(feature = "wgpu")]
impl Lease<crate::WgpuBackend> {
    /// The leased bytes as a binding resource (buffer, offset, size) for a bind group.
    pub fn binding(&self) -> wgpu_types::BindingResource<'_> {
        wgpu_types::BindingResource::Buffer(wgpu_types::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.size),
        })
    }

    /// The leased bytes as a slice, for `set_vertex_buffer` or `set_index_buffer`.
    pub fn slice(&self) -> wgpu_types::BufferSlice<'_> {
        self.buffer.slice(self.offset..self.offset + self.size)
    }
}

impl<B: Leasable> Drop for Lease<B> {
    /// Lets go of the pin: a handle released meanwhile gives its memory back now. Safe after the
    /// runtime is gone (the command then waits in an inbox nobody drains).
    fn drop(&mut self) {
        self.inbox.push_uncaptured(Command::Op(Op::Unpin {
            handle: self.handle,
            holder: PinHolder::Lease,
        }));
    }
}

impl<B: Leasable> ComputeClient<B> {
    /// Leases `binding`'s bytes to the user's own passes on the same device ([`Lease`]): submits
    /// this client's stream, so every write it enqueued before is on the device queue ahead of
    /// anything the caller submits next, without waiting for the device; pins the memory until
    /// the lease drops. Work of other streams that writes it must be flushed by the caller.
    /// `BindingError::ForeignHandle` for a handle of another runtime, `ReleasedHandle` for a
    /// released one, the stream's fault if it has one. May tick: a blocking call (it waits for
    /// the tick that submits, not for the device).
    pub fn lease(&self, binding: impl Into<Binding>) -> Result<Lease<B>> {
        let binding = binding.into();
        let handle = binding.handle();
        // One binding in, one lease out.
        self.leases([binding])?
            .pop()
            .ok_or(Error::Binding(BindingError::ReleasedHandle { handle }))
    }

    /// Leases every binding of `bindings` as [`ComputeClient::lease`] does, with one submit of
    /// the stream for all: a frame that draws from several handles waits for one tick, not one
    /// per handle. On an error nothing stays leased. May tick: a blocking call.
    pub fn leases<I>(&self, bindings: I) -> Result<Vec<Lease<B>>>
    where
        I: IntoIterator,
        I::Item: Into<Binding>,
    {
        let bindings: SmallVec<[Binding; 4]> = bindings.into_iter().map(Into::into).collect();
        for binding in &bindings {
            binding.validate(self.shared.id)?;
        }
        // Pinned before the submit, in the same drain as anything enqueued before the lease.
        for binding in &bindings {
            let handle = binding.handle();
            self.shared.inbox.push_uncaptured(Command::Op(Op::Pin {
                handle,
                holder: PinHolder::Lease,
            }));
        }
        let pins = Unpin {
            inbox: &self.shared.inbox,
            handles: bindings.iter().map(Binding::handle).collect(),
            armed: true,
        };
        self.mark()?;
        let runtime = self.shared.runtime.lock();
        let mut found = SmallVec::<[(Region, B::Buffer); 4]>::new();
        for binding in &bindings {
            let region = runtime.binding_region(binding)?;
            let buffer = runtime
                .backend()
                .lease_buffer(region)
                .ok_or(Error::Binding(BindingError::ReleasedHandle {
                    handle: binding.handle(),
                }))?;
            found.push((region, buffer));
        }
        drop(runtime);
        pins.disarm();
        Ok(bindings
            .iter()
            .zip(found)
            .map(|(binding, (region, buffer))| Lease {
                buffer,
                offset: region.offset,
                size: region.size,
                handle: binding.handle(),
                runtime: self.shared.id,
                inbox: self.shared.inbox.clone(),
            })
            .collect())
    }
}

/// Unpins on an early return of [`ComputeClient::leases`].
struct Unpin<'a> {
    inbox: &'a Arc<Inbox>,
    handles: SmallVec<[HandleId; 4]>,
    armed: bool,
}

impl Unpin<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Unpin<'_> {
    fn drop(&mut self) {
        if self.armed {
            for &handle in &self.handles {
                self.inbox.push_uncaptured(Command::Op(Op::Unpin {
                    handle,
                    holder: PinHolder::Lease,
                }));
            }
        }
    }
}

#[cfg(feature = "wgpu")]
impl ComputeClient<crate::WgpuBackend> {
    /// The wgpu device the runtime runs on, for the user's own pipelines. Takes the runtime
    /// lock; never ticks.
    pub fn wgpu_device(&self) -> wgpu_types::Device {
        self.shared.runtime.lock().backend().device().clone()
    }

    /// The wgpu queue the runtime submits on: the user's submissions on it are ordered with
    /// gpuworld's by submission. Takes the runtime lock; never ticks.
    pub fn wgpu_queue(&self) -> wgpu_types::Queue {
        self.shared.runtime.lock().backend().queue().clone()
    }

    /// Bytes that crossed between host and device so far ([`crate::HostTraffic`]). Takes the
    /// runtime lock; never ticks.
    pub fn wgpu_host_traffic(&self) -> crate::HostTraffic {
        self.shared.runtime.lock().backend().host_traffic()
    }
}

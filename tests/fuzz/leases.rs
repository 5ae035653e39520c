//! The fuzzer's leases (issue 48, `docs/render.md`): `lease` and `leases` of random live handles
//! kept while other operations run (among them drops of the leased handle, allocations of its
//! size, writes, launches and compactions), and `drop lease`. A lease pins the handle's memory:
//! while it is held, even once the handle is released, the memory is neither given to another
//! handle nor moved. Checks:
//! - on wgpu, the leased range read directly through the lease's buffer, offset and size (a copy
//!   on the runtime's device and queue, as a renderer's) holds the model's bytes: the handle's
//!   current bytes while it lives, its bytes at its release after (a new allocation of the same
//!   size is made and written first, so that reused memory shows);
//! - on every backend, memory in use covers every leased handle that was released;
//! - a lease of a released handle is `BindingError::ReleasedHandle`, and `leases` with one in
//!   it fails whole and leaves nothing pinned (the end-of-run check finds no pin);
//! - once every lease is dropped, the end-of-run leak check finds nothing in use or pinned.
//!
//! The cpu backend has no `Leasable` implementation (a lease of a cpu handle does not compile),
//! so its runs draw no lease operations.

use super::model::{Expected, View};
use super::session::Fuzzer;
use gpuworld::error::BindingError;
use gpuworld::{Backend, Binding, ComputeClient, Error, HandleId, Leasable, Lease};
use std::collections::HashSet;

/// Leases held at once at most; a lease operation past it drops one instead.
const LEASES_HELD: usize = 6;

/// A lease the fuzzer holds, type-erased.
pub trait HeldLease {
    /// The leased bytes.
    fn size(&self) -> u64;
    /// The leased bytes read directly through the lease, or `None` where the backend has no
    /// memory to read (the sim's lease is a storage id).
    fn read(&self) -> Result<Option<Vec<u8>>, String>;
}

/// How a backend takes leases.
pub trait Lessor<B: Backend>: Sync {
    fn leases(
        &self,
        client: &ComputeClient<B>,
        bindings: &[Binding],
    ) -> gpuworld::Result<Vec<Box<dyn HeldLease>>>;
}

/// A backend's leases as they come: the pin only (the sim's).
pub struct PinOnly;

impl<B: Leasable> HeldLease for Lease<B> {
    fn size(&self) -> u64 {
        Lease::size(self)
    }

    fn read(&self) -> Result<Option<Vec<u8>>, String> {
        Ok(None)
    }
}

impl<B: Leasable> Lessor<B> for PinOnly {
    fn leases(
        &self,
        client: &ComputeClient<B>,
        bindings: &[Binding],
    ) -> gpuworld::Result<Vec<Box<dyn HeldLease>>> {
        Ok(client
            .leases(bindings.iter().copied())
            .inspect(|leases| assert_eq!(leases.len(), bindings.len()))?
            .into_iter()
            .map(|lease| Box::new(lease) as Box<dyn HeldLease>)
            .collect())
    }
}

/// wgpu leases, read back through the lease's buffer with a copy on the runtime's own device and
/// queue, as a renderer sharing the device reads them.
#[cfg(feature = "wgpu")]
pub struct ReadBack;

#[cfg(feature = "wgpu")]
struct WgpuHeld {
    lease: gpuworld::RenderLease,
    device: gpuworld::wgpu::Device,
    queue: gpuworld::wgpu::Queue,
}

#[cfg(feature = "wgpu")]
impl HeldLease for WgpuHeld {
    fn size(&self) -> u64 {
        self.lease.size()
    }

    fn read(&self) -> Result<Option<Vec<u8>>, String> {
        use gpuworld::wgpu;
        let (buffer, offset, size) = (self.lease.buffer(), self.lease.offset(), self.lease.size());
        if size == 0 {
            return Ok(Some(Vec::new()));
        }
        if offset % wgpu::COPY_BUFFER_ALIGNMENT != 0 {
            return Err(format!("a lease at offset {offset} that no copy can read"));
        }
        // Copies move whole words: read up to the word past the end, within the buffer.
        let copied = size.next_multiple_of(4).min(buffer.size() - offset);
        if copied < size || copied % 4 != 0 {
            return Err(format!(
                "a lease of {size} bytes at {offset} in a buffer of {} bytes",
                buffer.size()
            ));
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("fuzz lease readback"),
            size: copied,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, copied);
        self.queue.submit([encoder.finish()]);
        let (sender, receiver) = std::sync::mpsc::channel();
        staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|error| format!("polling the lease's readback: {error}"))?;
        receiver
            .recv()
            .map_err(|_| "the lease's readback never mapped".to_string())?
            .map_err(|error| format!("mapping the lease's readback: {error}"))?;
        let bytes = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|error| format!("the lease's readback mapped range: {error:?}"))?
            .to_vec();
        Ok(Some(bytes[..size as usize].to_vec()))
    }
}

#[cfg(feature = "wgpu")]
impl Lessor<gpuworld::WgpuBackend> for ReadBack {
    fn leases(
        &self,
        client: &ComputeClient<gpuworld::WgpuBackend>,
        bindings: &[Binding],
    ) -> gpuworld::Result<Vec<Box<dyn HeldLease>>> {
        let (device, queue) = (client.wgpu_device(), client.wgpu_queue());
        Ok(client
            .leases(bindings.iter().copied())?
            .into_iter()
            .map(|lease| {
                Box::new(WgpuHeld {
                    lease,
                    device: device.clone(),
                    queue: queue.clone(),
                }) as Box<dyn HeldLease>
            })
            .collect())
    }
}

/// A lease the fuzzer holds, and what its bytes must be.
pub struct Held {
    lease: Box<dyn HeldLease>,
    handle: HandleId,
    /// The operation that took it, for the report.
    taken: u64,
    /// The model of the handle when its last clone was dropped; `None` while it lives.
    released: Option<Expected>,
}

impl<B: Backend> Fuzzer<'_, B> {
    /// Leases one or two random live handles (with `leases` for two), now and then with a
    /// released handle among them, which must fail whole with `ReleasedHandle`.
    pub fn take_lease(&mut self) -> Result<(), String> {
        let Some(lessor) = self.lessor else {
            return Ok(());
        };
        if self.leases.len() >= LEASES_HELD {
            return self.drop_lease();
        }
        let count = if self.rng.chance(750) { 1 } else { 2 };
        let mut bindings = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..count {
            let index = self.pick_handle();
            bindings.push(self.handles[index].binding());
            ids.push(self.handles[index].id());
        }
        let client = self.stream().clone();
        if let Some(stale) = self.rng.chance(150).then(|| self.pick_released()).flatten() {
            let position = self.rng.index(count + 1);
            bindings.insert(position, stale);
            let leased = self.leases.iter().any(|held| held.handle == stale.handle());
            self.log(format!(
                "leases({ids:?} with released {} at {position}{}): refused",
                stale.handle(),
                if leased { ", itself leased" } else { "" }
            ));
            self.tally.refusals += 1;
            let expected = Error::Binding(BindingError::ReleasedHandle {
                handle: stale.handle(),
            });
            return match lessor.leases(&client, &bindings) {
                Ok(_) => Err(format!(
                    "a lease of released {} succeeded, expected {expected}",
                    stale.handle()
                )),
                Err(error) if error == expected => Ok(()),
                Err(error) => Err(format!(
                    "a lease of released {}: expected {expected}, got {error}",
                    stale.handle()
                )),
            };
        }
        self.log(format!("lease {ids:?}"));
        let leases = lessor
            .leases(&client, &bindings)
            .map_err(|error| format!("a lease of live handles failed: {error}"))?;
        self.tally.leases += leases.len() as u64;
        for (lease, id) in leases.into_iter().zip(ids) {
            let capacity = self.allocations[&id].model.len() as u64;
            if lease.size() != capacity {
                return Err(format!(
                    "a lease of {id} ({capacity} bytes) leased {} bytes",
                    lease.size()
                ));
            }
            self.leases.push(Held {
                lease,
                handle: id,
                taken: self.op,
                released: None,
            });
        }
        Ok(())
    }

    /// Drops a random held lease, often checking it first.
    pub fn drop_lease(&mut self) -> Result<(), String> {
        if self.leases.is_empty() {
            return self.take_lease();
        }
        let index = self.rng.index(self.leases.len());
        if self.rng.chance(600) {
            self.check_lease(index)?;
        }
        let held = self.leases.swap_remove(index);
        let state = if held.released.is_some() {
            "released"
        } else {
            "live"
        };
        self.log(format!(
            "drop the lease of {} ({state}) taken at #{}",
            held.handle, held.taken
        ));
        drop(held);
        Ok(())
    }

    /// A random binding of a released handle to misuse, or `None` if there is none; one a lease
    /// still pins is as released as any (`BindingError::ReleasedHandle`, `docs/render.md`).
    pub fn pick_released(&mut self) -> Option<Binding> {
        (!self.released.is_empty()).then(|| self.released[self.rng.index(self.released.len())])
    }

    /// Records that the last clone of `id` is being dropped, with the bytes it holds.
    pub fn leased_handle_released(&mut self, id: HandleId) {
        let Some(allocation) = self.allocations.get(&id) else {
            return;
        };
        for held in self.leases.iter_mut().filter(|held| held.handle == id) {
            held.released = Some(
                allocation
                    .model
                    .expected(View::whole(allocation.model.len())),
            );
        }
    }

    /// Checks lease `index`: its memory kept while its handle is released (an allocation of the
    /// same size made and written first), every released leased handle's memory in use, and on
    /// wgpu its bytes read directly.
    fn check_lease(&mut self, index: usize) -> Result<(), String> {
        let id = self.leases[index].handle;
        let size = self.leases[index].lease.size() as usize;
        if self.leases[index].released.is_some() {
            let data = self.rng.bytes(size);
            let handle = self.stream().create_from_slice(&data);
            self.log(format!(
                "{} = create_from_slice({size} bytes): the size of leased, released {id}",
                handle.id()
            ));
            self.adopt(handle, super::model::ModelBuffer::with_bytes(&data));
        }
        self.log(format!(
            "check the lease of {id}: sync every stream, then read it"
        ));
        for client in &self.streams {
            client
                .sync()
                .map_err(|error| format!("a sync before a lease check failed: {error}"))?;
        }
        self.tally.lease_checks += 1;
        let mut pinned = HashSet::new();
        let mut released_bytes = 0;
        for held in &self.leases {
            if held.released.is_some() && pinned.insert(held.handle) {
                released_bytes += held.lease.size();
            }
        }
        let usage = self.client.memory_usage();
        if usage.bytes_in_use < released_bytes {
            return Err(format!(
                "leased memory not kept: {released_bytes} bytes of released handles are leased, \
                 memory in use is {usage:?}\n{}",
                self.client.snapshot()
            ));
        }
        let held = &self.leases[index];
        let Some(got) = held.lease.read()? else {
            return Ok(());
        };
        let live;
        let expected = match &held.released {
            Some(expected) => expected,
            None => {
                live = self.allocations[&id].model.expected(View::whole(size));
                &live
            }
        };
        self.tally.reads += 1;
        self.tally.bytes_compared += got.len() as u64;
        expected.check(&got).map_err(|error| {
            format!(
                "the lease of {id} (taken at #{}, handle {}) reads wrong: {error}",
                held.taken,
                if held.released.is_some() {
                    "released"
                } else {
                    "live"
                }
            )
        })
    }
}

//! Collectives over a group of clients, one per device: `all_reduce`, `broadcast`,
//! `all_gather`, `reduce_scatter` and `sync_collective`.
//!
//! Each collective is, on every rank, tasks on that rank's stream: a read of its input (ordered
//! after the input's last write on any stream, as alignment orders every read) and a write of
//! its share of the result (before every later use, held at ingest until the result is there).
//! Their bindings are pinned, aligned and reclaimed like a launch's. The result is computed once
//! on the host, in rank order (`host.rs`, `reduce.rs`); every call returns at once.
//!
//! ```
//! use gpuworld::collective::{ElemType, Group, ReduceOp};
//! use gpuworld::{CpuBackend, ComputeClient, Driver, RuntimeConfig};
//!
//! let clients: Vec<_> = CpuBackend::with_devices(2)
//!     .into_iter()
//!     .map(|b| ComputeClient::new(b, RuntimeConfig::default(), Driver::DeviceThread))
//!     .collect();
//! let group = Group::new(clients)?;
//! let buffers: Vec<_> = group.clients().iter().enumerate()
//!     .map(|(rank, c)| c.create_from_slice(bytemuck::cast_slice(&[rank as f32 + 1.0; 4])))
//!     .collect();
//! let bindings: Vec<_> = buffers.iter().map(|h| h.binding()).collect();
//! group.all_reduce(&bindings, ElemType::F32, ReduceOp::Sum)?;
//! let summed: Vec<f32> = group.clients()[1].read_one_as(&buffers[1])?;
//! assert_eq!(summed, [3.0; 4]);
//! # Ok::<(), gpuworld::Error>(())
//! ```

mod host;
mod reduce;

pub use reduce::{ElemType, ReduceOp, reduce_host};

use crate::ComputeClient;
use crate::devices::check_distinct;
use gpuworld_systems::cross_device::{CollectiveOp, DeviceCollectives};
use gpuworld_systems::error::{BindingError, CollectiveError};
use gpuworld_systems::{Backend, Binding, Error, HostBytes, Result};
use host::{Combine, Gathered, Share};
use smallvec::{SmallVec, smallvec};
use std::sync::{Arc, OnceLock};

/// The backend's collectives on the devices of a group (`CrossDevice::device_collectives`), or
/// `None` where it has none.
type OnDevices = Option<Result<Arc<dyn DeviceCollectives>>>;

/// Clients of distinct devices of one backend that run collectives together; rank `r` is the
/// `r`-th client.
pub struct Group<B: Backend> {
    clients: Vec<ComputeClient<B>>,
    /// The backend's collectives on the group's devices (NCCL's communicators), made at its
    /// first collective.
    on_devices: OnceLock<OnDevices>,
}

impl<B: Backend> std::fmt::Debug for Group<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("clients", &self.clients)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Group<B> {
    /// A group of `clients`, ranked in that order; `CollectiveError::DeviceListedTwice` when two of
    /// them run on one device, `CollectiveError::MismatchedBuffers` for an empty group.
    pub fn new(clients: Vec<ComputeClient<B>>) -> Result<Group<B>> {
        if clients.is_empty() {
            return Err(mismatch(
                "group",
                "a group needs at least one client".into(),
            ));
        }
        let ids: Vec<_> = clients.iter().map(ComputeClient::device_id).collect();
        check_distinct(&ids)?;
        Ok(Group {
            clients,
            on_devices: OnceLock::new(),
        })
    }

    /// The clients, by rank.
    pub fn clients(&self) -> &[ComputeClient<B>] {
        &self.clients
    }

    /// The clients, by rank, giving the group up.
    pub fn into_clients(self) -> Vec<ComputeClient<B>> {
        self.clients
    }

    /// How many ranks.
    pub fn size(&self) -> usize {
        self.clients.len()
    }

    /// Replaces each rank's `buffers[rank]` with the element-wise `op` of every rank's buffer.
    pub fn all_reduce(&self, buffers: &[Binding], elem: ElemType, op: ReduceOp) -> Result<()> {
        let name = "all_reduce";
        let sizes = self.check_bindings(name, buffers)?;
        same_sizes(name, &sizes)?;
        whole_elements(name, sizes[0], elem)?;
        let len = sizes[0] as usize;
        if let Some(on_devices) = self.on_devices() {
            let count = len / elem.size();
            let op = CollectiveOp::AllReduce { elem, op, count };
            return self.run_on_devices(&*on_devices?, op, &singles(buffers));
        }
        self.run(buffers, reducer(elem, op), |_| Some(0..len), buffers)
    }

    /// Copies rank `root`'s `buffers[root]` into every other rank's buffer.
    pub fn broadcast(&self, buffers: &[Binding], root: usize) -> Result<()> {
        let name = "broadcast";
        let sizes = self.check_bindings(name, buffers)?;
        same_sizes(name, &sizes)?;
        if root >= self.size() {
            return Err(mismatch(
                name,
                format!("root {root} in a group of {}", self.size()),
            ));
        }
        let len = sizes[0] as usize;
        if let Some(on_devices) = self.on_devices() {
            let op = CollectiveOp::Broadcast { root, bytes: len };
            return self.run_on_devices(&*on_devices?, op, &singles(buffers));
        }
        let inputs = &buffers[root..=root];
        let combine: Combine = Box::new(|inputs: &[HostBytes]| Ok(inputs[0].to_vec()));
        self.run(
            inputs,
            combine,
            |rank| (rank != root).then_some(0..len),
            buffers,
        )
    }

    /// Writes every rank's input, concatenated in rank order, into each rank's output, which
    /// holds `size()` inputs.
    pub fn all_gather(&self, inputs: &[Binding], outputs: &[Binding]) -> Result<()> {
        let name = "all_gather";
        let sizes = self.check_bindings(name, inputs)?;
        same_sizes(name, &sizes)?;
        let out_sizes = self.check_bindings(name, outputs)?;
        let total = sizes[0] * self.size() as u64;
        if let Some(bad) = out_sizes.iter().position(|&s| s != total) {
            return Err(mismatch(
                name,
                format!(
                    "output of rank {bad} has {} bytes, not {} ranks x {} bytes = {total}",
                    out_sizes[bad],
                    self.size(),
                    sizes[0]
                ),
            ));
        }
        if let Some(on_devices) = self.on_devices() {
            let op = CollectiveOp::AllGather {
                bytes: sizes[0] as usize,
            };
            return self.run_on_devices(&*on_devices?, op, &pairs(inputs, outputs));
        }
        let combine: Combine = Box::new(|inputs: &[HostBytes]| Ok(inputs.concat()));
        let total = total as usize;
        self.run(inputs, combine, |_| Some(0..total), outputs)
    }

    /// Reduces every rank's input element-wise with `op` and writes part `rank` of the result
    /// (a `size()`-th of it) into `outputs[rank]`.
    pub fn reduce_scatter(
        &self,
        inputs: &[Binding],
        outputs: &[Binding],
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<()> {
        let name = "reduce_scatter";
        let sizes = self.check_bindings(name, inputs)?;
        same_sizes(name, &sizes)?;
        let out_sizes = self.check_bindings(name, outputs)?;
        let n = self.size() as u64;
        let part = sizes[0] / n;
        if !sizes[0].is_multiple_of(n) {
            return Err(mismatch(
                name,
                format!("inputs of {} bytes do not split into {n} parts", sizes[0]),
            ));
        }
        whole_elements(name, part, elem)?;
        if let Some(bad) = out_sizes.iter().position(|&s| s != part) {
            return Err(mismatch(
                name,
                format!(
                    "output of rank {bad} has {} bytes, not the {part} of one part",
                    out_sizes[bad]
                ),
            ));
        }
        let part = part as usize;
        if let Some(on_devices) = self.on_devices() {
            let count = part / elem.size();
            let op = CollectiveOp::ReduceScatter { elem, op, count };
            return self.run_on_devices(&*on_devices?, op, &pairs(inputs, outputs));
        }
        self.run(
            inputs,
            reducer(elem, op),
            |rank| Some(rank * part..(rank + 1) * part),
            outputs,
        )
    }

    /// Waits until every rank's work so far, collectives included, has run; the first rank's
    /// error, if any (every rank is synced either way).
    pub fn sync_collective(&self) -> Result<()> {
        let mut first = Ok(());
        for client in &self.clients {
            let result = client.sync();
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// The backend's collectives on the group's devices, made at the first call; `None` where
    /// the backend has none (the host combines). Several ranks need device threads: the
    /// backend's calls of several ranks from one thread must be grouped (NCCL's), and a
    /// manually ticked runtime makes them from whoever ticks it.
    fn on_devices(&self) -> OnDevices {
        self.on_devices
            .get_or_init(|| {
                let devices: Vec<u32> = self.clients.iter().map(|c| c.device_id().index).collect();
                if !self.clients.first()?.capabilities().device_collectives {
                    return None;
                }
                let made = B::device_collectives(&devices);
                let manual = self
                    .clients
                    .iter()
                    .any(|c| c.driver() == crate::Driver::Manual);
                if self.size() > 1 && manual {
                    return Some(Err(mismatch(
                        "device collectives",
                        format!(
                            "{} collectives over several devices need Driver::DeviceThread clients",
                            B::NAME
                        ),
                    )));
                }
                Some(made)
            })
            .clone()
    }

    /// Queues rank `r`'s part of `op` on each rank's stream over `buffers[r]`.
    fn run_on_devices(
        &self,
        on_devices: &dyn DeviceCollectives,
        op: CollectiveOp,
        buffers: &[SmallVec<[Binding; 4]>],
    ) -> Result<()> {
        let work = (0..self.size())
            .map(|rank| on_devices.rank_work(rank, op))
            .collect::<Result<Vec<_>>>()?;
        for ((client, work), bindings) in self.clients.iter().zip(work).zip(buffers) {
            client.push_native(work, bindings.clone());
        }
        Ok(())
    }

    /// Queues the reads of `inputs` (every rank's, or the root's alone), each on its rank, then
    /// each rank's write of `share(rank)` of the result into `outputs[rank]`.
    fn run(
        &self,
        inputs: &[Binding],
        combine: Combine,
        share: impl Fn(usize) -> Option<std::ops::Range<usize>>,
        outputs: &[Binding],
    ) -> Result<()> {
        // Inputs of every rank, or of the root alone (a broadcast), found by their runtime.
        let readers = inputs
            .iter()
            .map(|input| {
                self.clients
                    .iter()
                    .find(|c| c.runtime_id() == input.runtime())
                    .ok_or(Error::Binding(BindingError::ForeignHandle {
                        handle: input.handle(),
                        owner: input.runtime(),
                        this: self.clients[0].runtime_id(),
                    }))
            })
            .collect::<Result<Vec<_>>>()?;
        let reads = readers
            .iter()
            .zip(inputs)
            .map(|(client, input)| {
                client.read_from_other_runtime(std::slice::from_ref(input), None)
            })
            .collect::<Result<Vec<_>>>()?;
        let gathered = Gathered::new(reads, combine);
        for (rank, (client, output)) in self.clients.iter().zip(outputs).enumerate() {
            if let Some(range) = share(rank) {
                client.write_arriving(*output, Share::arriving(&gathered, range));
            }
        }
        Ok(())
    }

    /// Each rank's binding checked against its client (its runtime, its range); their sizes.
    fn check_bindings(&self, name: &'static str, bindings: &[Binding]) -> Result<Vec<u64>> {
        if bindings.len() != self.size() {
            return Err(mismatch(
                name,
                format!("{} buffers for a group of {}", bindings.len(), self.size()),
            ));
        }
        self.clients
            .iter()
            .zip(bindings)
            .map(|(client, binding)| {
                let (start, end) = binding.validate(client.runtime_id())?;
                Ok(end - start)
            })
            .collect()
    }
}

/// Each rank's one buffer, as `run_on_devices` takes its buffers.
fn singles(buffers: &[Binding]) -> Vec<SmallVec<[Binding; 4]>> {
    buffers.iter().map(|b| smallvec![*b]).collect()
}

/// Each rank's `[input, output]` pair, as `run_on_devices` takes its buffers.
fn pairs(inputs: &[Binding], outputs: &[Binding]) -> Vec<SmallVec<[Binding; 4]>> {
    inputs
        .iter()
        .zip(outputs)
        .map(|(i, o)| smallvec![*i, *o])
        .collect()
}

/// The host reduction of `elem` by `op`, as a collective's combine step.
fn reducer(elem: ElemType, op: ReduceOp) -> Combine {
    Box::new(move |inputs: &[HostBytes]| {
        let slices: Vec<&[u8]> = inputs.iter().map(|b| &b[..]).collect();
        reduce_host(&slices, elem, op)
    })
}

/// Every rank's buffer has the size of rank 0's, else `MismatchedBuffers` naming the first that
/// does not.
pub(crate) fn same_sizes(name: &'static str, sizes: &[u64]) -> Result<()> {
    match sizes.iter().position(|&s| s != sizes[0]) {
        Some(bad) => Err(mismatch(
            name,
            format!(
                "rank 0 has {} bytes, rank {bad} has {}",
                sizes[0], sizes[bad]
            ),
        )),
        None => Ok(()),
    }
}

/// `bytes` hold a whole number of `elem`s, else `MismatchedBuffers`.
pub(crate) fn whole_elements(name: &'static str, bytes: u64, elem: ElemType) -> Result<()> {
    if !bytes.is_multiple_of(elem.size() as u64) {
        return Err(mismatch(
            name,
            format!(
                "{bytes} bytes are not a whole number of {elem:?} elements ({} bytes each)",
                elem.size()
            ),
        ));
    }
    Ok(())
}

/// `CollectiveError::MismatchedBuffers` of `op` for `reason`.
pub(crate) fn mismatch(op: &'static str, reason: String) -> Error {
    Error::Collective(CollectiveError::MismatchedBuffers {
        op,
        reason: reason.into(),
    })
}

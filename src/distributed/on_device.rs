//! Collectives of a process group on the devices: when the clients' backend has collectives
//! across processes (CUDA's NCCL), the ranks agree to use them at their first collective, rank 0
//! makes the group's id and hands it out over the TCP connections, and each rank joins with its
//! client's device. From then on a collective is one native task queued on the client's stream,
//! ordered against the rank's other work there like any command, and the call returns without
//! waiting for it. A watchdog (`watchdog.rs`) ends collectives that can no longer complete.
//!
//! Sizes are checked across ranks over TCP the first time each shape of call is made (the
//! collective and its sizes), so a loop of the same calls pays for the check once and a
//! mismatch is a typed error on every rank instead of a hang.

use super::placement::{DeviceGroup, OnDevice};
use super::watchdog::Watchdog;
use super::{CollectivesOn, Link, ProcessGroup};
use crate::ComputeClient;
use crate::collective::mismatch;
use gpuworld_systems::cross_device::{CollectiveOp, DeviceCollectives};
use gpuworld_systems::{Backend, Binding, Result};
use smallvec::SmallVec;
use std::collections::HashSet;
use std::sync::Arc;

impl ProcessGroup {
    /// Where this group runs collectives with `client`'s backend: its devices' collectives, or
    /// `None` for the host path. The first call decides, with every rank.
    pub(super) fn on_device<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
    ) -> Result<Option<Arc<dyn DeviceCollectives>>> {
        let device = client.device_id().index;
        match &self.on_device {
            OnDevice::Host => return Ok(None),
            OnDevice::Device(group) if group.backend == B::NAME && group.device == device => {
                return Ok(Some(group.collectives.clone()));
            }
            OnDevice::Device(group) => {
                return Err(mismatch(
                    "collective",
                    format!(
                        "this group's collectives run on {} device {}, not on {} device {device} \
                         (one client per rank)",
                        group.backend,
                        group.device,
                        B::NAME
                    ),
                ));
            }
            OnDevice::Undecided => {}
        }
        let wanted = self.config.collectives_on;
        if wanted == CollectivesOn::Host || !client.capabilities().process_collectives {
            self.on_device = OnDevice::Host;
            return Ok(None);
        }
        let available = B::process_collectives();
        // Every rank says whether it can; all use the devices, or none does.
        let ready = [u8::from(available.is_ok())];
        let ready = self.all_gather_bytes(&ready)?;
        let unable: Vec<usize> = (0..ready.len()).filter(|&r| ready[r] == 0).collect();
        let processes = match (available, unable.is_empty()) {
            (Ok(processes), true) => processes,
            (mine, _) => {
                let why = mine
                    .err()
                    .map_or(String::new(), |error| format!(" (here: {error})"));
                let reason = format!(
                    "rank(s) {unable:?} cannot run {} collectives across processes{why}",
                    B::NAME
                );
                if wanted == CollectivesOn::Device {
                    return Err(mismatch("collective", reason));
                }
                tracing::warn!(target: "gpuworld::collective", rank = self.rank(), "{reason}: the group's collectives go through host memory over TCP");
                self.on_device = OnDevice::Host;
                return Ok(None);
            }
        };
        // Rank 0's id, to every rank: its length first (0 when rank 0 could not make one).
        let id = if self.rank() == 0 {
            processes.group_id()
        } else {
            Ok(Vec::new())
        };
        let len = id.as_ref().map_or(0, Vec::len) as u64;
        let len = self.broadcast_bytes(&len.to_le_bytes(), 0)?;
        let len = <[u8; 8]>::try_from(len.as_slice()).map_or(0, u64::from_le_bytes) as usize;
        if len == 0 {
            id?;
            return Err(mismatch(
                "collective",
                "rank 0 could not make the group's id".into(),
            ));
        }
        // The others' bytes only give the size they expect.
        let mine = match id {
            Ok(id) if self.rank() == 0 => id,
            _ => vec![0; len],
        };
        let id = self.broadcast_bytes(&mine, 0)?;
        let collectives = processes.join(device, &id, self.rank(), self.world_size())?;
        let peers = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(rank, link)| match link {
                Link::Live(peer) => match peer.watch_handle() {
                    Ok(stream) => Some((rank, stream)),
                    Err(error) => {
                        tracing::warn!(target: "gpuworld::collective", peer = rank, %error, "cannot watch the connection to this rank: its exit is noticed only by the collective timeout");
                        None
                    }
                },
                _ => None,
            })
            .collect();
        let watchdog = Watchdog::start(self.rank(), &collectives, peers, self.config.io_timeout);
        tracing::info!(target: "gpuworld::collective", rank = self.rank(), backend = B::NAME, device, "process group collectives run on the devices");
        self.on_device = OnDevice::Device(DeviceGroup {
            backend: B::NAME,
            device,
            collectives: collectives.clone(),
            checked: HashSet::new(),
            _watchdog: watchdog,
        });
        Ok(Some(collectives))
    }

    /// Queues this rank's part of `op` over `buffers` on `client`'s stream, once the shape of the
    /// call (`shape`, the same on every rank for a correct call) is known to match every rank's.
    pub(super) fn run_on_device<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        collectives: &dyn DeviceCollectives,
        op: CollectiveOp,
        shape: Vec<u8>,
        fits: Result<()>,
        buffers: SmallVec<[Binding; 4]>,
    ) -> Result<()> {
        if let Err(error) = fits {
            // The ranks checking this shape fail with it, naming this rank, instead of waiting.
            let _ = self.all_gather_bytes(&shape_frame(b"!"));
            return Err(error);
        }
        if self.needs_check(&shape) {
            let name = op_name(op);
            let shapes = self.all_gather_bytes(&shape_frame(&shape))?;
            let frame = shape_frame(&shape).len();
            let differing: Vec<usize> = shapes
                .chunks(frame)
                .enumerate()
                .filter(|(_, theirs)| *theirs != shape_frame(&shape).as_slice())
                .map(|(rank, _)| rank)
                .collect();
            if !differing.is_empty() {
                return Err(mismatch(
                    name,
                    format!(
                        "rank(s) {differing:?} called {name} with other sizes than rank {} \
                         (or another collective)",
                        self.rank()
                    ),
                ));
            }
            self.remember(shape);
        }
        let work = collectives.rank_work(self.rank(), op)?;
        client.push_native(work, buffers);
        Ok(())
    }

    /// Queues this rank's sends and receives, checking the first time each pairing is made that
    /// every sender's size is its receiver's.
    pub(super) fn exchange_on_device<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        collectives: &dyn DeviceCollectives,
        sends: &[(Binding, usize)],
        recvs: &[(Binding, usize)],
    ) -> Result<()> {
        let ranks = |list: &[(Binding, usize)]| list.iter().map(|(_, r)| *r).collect::<Vec<_>>();
        let peers = |list: &[(Binding, usize)]| {
            gpuworld_systems::cross_device::Peers::new(&ranks(list)).ok_or_else(|| {
                mismatch(
                    "send_recv",
                    format!(
                        "{} transfers one way; at most {} are posted together",
                        list.len(),
                        gpuworld_systems::cross_device::Peers::MAX
                    ),
                )
            })
        };
        let op = CollectiveOp::PointToPoint {
            sends: peers(sends)?,
            recvs: peers(recvs)?,
        };
        let mut shape = vec![b'p'];
        for (binding, rank) in sends.iter().chain(recvs) {
            shape.extend((*rank as u64).to_le_bytes());
            shape.extend(binding.size().to_le_bytes());
        }
        shape.push(sends.len() as u8);
        if self.needs_check(&shape) {
            self.check_pairs(sends, recvs)?;
            self.remember(shape);
        }
        let work = collectives.rank_work(self.rank(), op)?;
        let buffers = sends.iter().chain(recvs).map(|(b, _)| *b).collect();
        client.push_native(work, buffers);
        Ok(())
    }

    /// Each sender tells its receiver the size it sends, over TCP, and each receiver compares it
    /// with its buffer's.
    fn check_pairs(
        &mut self,
        sends: &[(Binding, usize)],
        recvs: &[(Binding, usize)],
    ) -> Result<()> {
        for (binding, to) in sends {
            self.send_bytes(&binding.size().to_le_bytes(), *to)?;
        }
        for (binding, from) in recvs {
            let sent = self.recv_bytes(*from)?;
            let sent = <[u8; 8]>::try_from(sent.as_slice())
                .ok()
                .map(u64::from_le_bytes);
            if sent != Some(binding.size()) {
                return Err(mismatch(
                    "recv",
                    format!(
                        "rank {from} sends {} bytes into a buffer of {} on rank {}",
                        sent.map_or("a malformed size".into(), |s| s.to_string()),
                        binding.size(),
                        self.rank()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn needs_check(&self, shape: &[u8]) -> bool {
        match &self.on_device {
            OnDevice::Device(group) => !group.checked.contains(shape),
            _ => true,
        }
    }

    fn remember(&mut self, shape: Vec<u8>) {
        if let OnDevice::Device(group) = &mut self.on_device {
            group.checked.insert(shape);
        }
    }
}

/// `shape` in a frame of fixed length, so that every rank's gathers to equal sizes.
fn shape_frame(shape: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8; 64];
    let digest = fxhash(shape);
    frame[..8].copy_from_slice(&(shape.len() as u64).to_le_bytes());
    frame[8..16].copy_from_slice(&digest.to_le_bytes());
    let head = shape.len().min(48);
    frame[16..16 + head].copy_from_slice(&shape[..head]);
    frame
}

fn fxhash(bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
    hasher.write(bytes);
    hasher.finish()
}

fn op_name(op: CollectiveOp) -> &'static str {
    match op {
        CollectiveOp::AllReduce { .. } => "all_reduce",
        CollectiveOp::Broadcast { .. } => "broadcast",
        CollectiveOp::AllGather { .. } => "all_gather",
        CollectiveOp::ReduceScatter { .. } => "reduce_scatter",
        _ => "send_recv",
    }
}

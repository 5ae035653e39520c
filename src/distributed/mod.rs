//! Process groups: one process per device, started by `gpuworld launch`, torchrun, mpirun or
//! Slurm, finding each other over TCP and running collectives across hosts.
//!
//! A process finds its place from the environment ([`ProcessGroupConfig::from_env`]), meets the
//! others at rank 0 ([`ProcessGroup::join`], `rendezvous.rs`), then runs collectives on its own
//! client's buffers: each reads the rank's buffer through its client, exchanges the bytes with
//! the other ranks through rank 0 (a star: rank 0 combines in rank order with the same host
//! reduction as [`crate::collective::Group`], so the bits match), and writes the result back
//! through the client, ordered on its stream like any read and write. `send`/`recv` go directly
//! between two ranks. Every socket wait has a timeout; a rank that dies or goes silent makes
//! the others' collectives fail with `CollectiveError::PeerFailed` naming it. With CUDA
//! clients the collectives run on the GPUs instead, over NCCL communicators spanning the
//! processes (`on_device.rs`: rank 0's unique id handed out over TCP, each collective a task on
//! the rank's stream), watched by a thread that ends them when a rank leaves or never joins
//! (`watchdog.rs`). `docs/distributed.md` has the whole picture.
//!
//! ```
//! use gpuworld::collective::{ElemType, ReduceOp};
//! use gpuworld::distributed::{ProcessGroup, ProcessGroupConfig};
//! use gpuworld::Driver;
//!
//! // A world of one; under `gpuworld launch` it would be `ProcessGroup::from_env()?`.
//! let mut group = ProcessGroup::join(ProcessGroupConfig::new(0, 1, "127.0.0.1", 0)?)?;
//! let client = gpuworld::cpu_client(Driver::DeviceThread)?;
//! let buffer = client.create_from_pod(&[1.0f32, 2.0]);
//! group.all_reduce(&client, &buffer, ElemType::F32, ReduceOp::Sum)?;
//! assert_eq!(client.read_one_as::<f32>(&buffer)?, [1.0, 2.0]);
//! # Ok::<(), gpuworld::Error>(())
//! ```

mod collectives;
mod env;
mod on_device;
mod placement;
mod rendezvous;
mod watchdog;
mod wire;

pub use env::{
    COLLECTIVE_TIMEOUT_ENV, CollectivesOn, DEFAULT_TIMEOUT, PROCESS_COLLECTIVES_ENV,
    ProcessGroupConfig, RENDEZVOUS_TIMEOUT_ENV,
};

use gpuworld_systems::{Error, Result};
use wire::Peer;

/// This process's membership of a group of processes, with a connection to every other rank.
/// Its calls block; every rank must make the same collective calls in the same order.
#[derive(Debug)]
pub struct ProcessGroup {
    config: ProcessGroupConfig,
    /// The connection to each rank, by rank.
    peers: Vec<Link>,
    /// Where the collectives run (decided at the first one with a client).
    on_device: placement::OnDevice,
}

/// This process's connection to one rank.
#[derive(Debug)]
enum Link {
    /// This process's own rank.
    Own,
    /// A working connection.
    Live(Peer),
    /// A connection that failed, and how: every later use returns this error.
    Lost(Error),
}

impl ProcessGroup {
    /// Meets the other ranks as `config` says and returns once every rank has arrived;
    /// `CollectiveError::RendezvousFailed` when one does not arrive within the rendezvous
    /// timeout (naming it), comes twice or disagrees on the world size.
    pub fn join(config: ProcessGroupConfig) -> Result<ProcessGroup> {
        let peers = rendezvous::rendezvous(&config)?
            .into_iter()
            .map(|peer| peer.map_or(Link::Own, Link::Live))
            .collect();
        Ok(ProcessGroup {
            config,
            peers,
            on_device: placement::OnDevice::Undecided,
        })
    }

    /// Joins the group this process's environment describes ([`ProcessGroupConfig::from_env`]).
    pub fn from_env() -> Result<ProcessGroup> {
        ProcessGroup::join(ProcessGroupConfig::from_env()?)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.config.rank
    }

    /// How many ranks the group has.
    pub fn world_size(&self) -> usize {
        self.config.world_size
    }

    /// This process's rank among those of its host.
    pub fn local_rank(&self) -> usize {
        self.config.local_rank
    }

    /// The backend whose devices run this group's collectives (`"cuda"` over NCCL), once a
    /// collective decided it; `None` while they go through host memory over TCP, or before.
    pub fn collectives_device(&self) -> Option<&'static str> {
        self.on_device.backend()
    }

    /// The configuration the group was joined with.
    pub fn config(&self) -> &ProcessGroupConfig {
        &self.config
    }

    /// The working connection to `rank`, or the error that lost it.
    fn peer(&mut self, rank: usize) -> Result<&mut Peer> {
        match &mut self.peers[rank] {
            Link::Live(peer) => Ok(peer),
            Link::Lost(error) => Err(error.clone()),
            Link::Own => unreachable!("rank {rank} asked for a connection to itself"),
        }
    }

    /// Records that the connection to `rank` failed with `error` (it is closed, so the peer's
    /// pending read ends too); the error.
    fn lose(&mut self, rank: usize, error: Error) -> Error {
        if let Link::Live(peer) = &self.peers[rank] {
            peer.close();
        }
        tracing::warn!(rank = self.rank(), peer = rank, %error, "lost a connection of the process group");
        self.peers[rank] = Link::Lost(error.clone());
        error
    }
}

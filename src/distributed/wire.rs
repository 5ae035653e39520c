//! The frames ranks exchange over TCP: a tag byte, a little-endian `u64` length, then the payload.
//! Every read and write runs under the socket's timeout, so a silent or dead peer is an error
//! naming its rank, never a hang.

use super::env::RENDEZVOUS_TIMEOUT_ENV;
use gpuworld_systems::Error;
use gpuworld_systems::error::CollectiveError;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// What a frame carries. The collectives' tags let a rank tell that a peer called another
/// collective instead of reading its bytes as if they fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tag {
    /// A rank's rank, world size and mesh port, to rank 0.
    Hello = 1,
    /// Rank 0's answer: the world is complete, with every rank's mesh address.
    World = 2,
    /// Rank 0's answer: the rendezvous failed, with the reason.
    Reject = 3,
    /// A rank's rank on a mesh connection, to the lower rank.
    MeshHello = 4,
    /// A rank or rank 0 reports a failure instead of its bytes ([`Failure`]).
    Failed = 5,
    AllReduce = 10,
    Broadcast = 11,
    AllGather = 12,
    ReduceScatter = 13,
    Send = 14,
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Tag> {
        [
            Tag::Hello,
            Tag::World,
            Tag::Reject,
            Tag::MeshHello,
            Tag::Failed,
            Tag::AllReduce,
            Tag::Broadcast,
            Tag::AllGather,
            Tag::ReduceScatter,
            Tag::Send,
        ]
        .into_iter()
        .find(|t| *t as u8 == byte)
    }
}

/// A connection to one other rank.
#[derive(Debug)]
pub(super) struct Peer {
    /// The rank at the other end.
    pub rank: usize,
    stream: TcpStream,
    /// The variable that sets the timeout in force, named when it runs out.
    timeout_env: &'static str,
}

impl Peer {
    /// A connection to `rank` met at the rendezvous, whose reads and writes each give up after
    /// `timeout`.
    pub fn new(rank: usize, stream: TcpStream, timeout: Duration) -> std::io::Result<Peer> {
        stream.set_nodelay(true)?;
        let mut peer = Peer {
            rank,
            stream,
            timeout_env: RENDEZVOUS_TIMEOUT_ENV,
        };
        peer.set_timeout(timeout, RENDEZVOUS_TIMEOUT_ENV)?;
        Ok(peer)
    }

    /// Changes how long each read and write waits, and the variable that set it.
    pub fn set_timeout(&mut self, timeout: Duration, env: &'static str) -> std::io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        self.timeout_env = env;
        Ok(())
    }

    /// A second handle on the connection, for a watchdog that only peeks at it.
    pub fn watch_handle(&self) -> std::io::Result<TcpStream> {
        self.stream.try_clone()
    }

    /// The peer's address as this end sees it.
    pub fn peer_ip(&self) -> std::io::Result<std::net::IpAddr> {
        Ok(self.stream.peer_addr()?.ip())
    }

    /// This end's address.
    pub fn local_ip(&self) -> std::io::Result<std::net::IpAddr> {
        Ok(self.stream.local_addr()?.ip())
    }

    /// Sends one frame.
    pub fn send(&mut self, tag: Tag, payload: &[u8]) -> Result<(), Error> {
        let mut header = [0u8; 9];
        header[0] = tag as u8;
        header[1..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        self.stream
            .write_all(&header)
            .and_then(|()| self.stream.write_all(payload))
            .map_err(|e| self.io_failure("sending", &e))
    }

    /// Receives one frame, whatever its tag.
    pub fn recv_any(&mut self) -> Result<(Tag, Vec<u8>), Error> {
        let mut header = [0u8; 9];
        self.stream
            .read_exact(&mut header)
            .map_err(|e| self.io_failure("receiving", &e))?;
        let Some(tag) = Tag::from_byte(header[0]) else {
            return Err(self.failed(format!(
                "sent a frame of unknown kind {}: not a gpuworld rank of this version",
                header[0]
            )));
        };
        let mut len = [0u8; 8];
        len.copy_from_slice(&header[1..]);
        let len = u64::from_le_bytes(len);
        // Grown as bytes arrive, so a corrupt length cannot allocate more than was sent.
        let mut payload = Vec::new();
        let read = (&mut self.stream)
            .take(len)
            .read_to_end(&mut payload)
            .map_err(|e| self.io_failure("receiving", &e))?;
        if read as u64 != len {
            return Err(self.failed(format!(
                "closed its connection after {read} of {len} bytes (exited or crashed?)"
            )));
        }
        Ok((tag, payload))
    }

    /// Receives one frame that must be `expected` (while this rank runs `op`): its payload, or
    /// the failure a [`Tag::Failed`] frame reports instead. The outer error means the
    /// connection is no longer usable.
    pub fn recv(
        &mut self,
        expected: Tag,
        op: &'static str,
    ) -> Result<Result<Vec<u8>, Failure>, Error> {
        let (tag, payload) = self.recv_any()?;
        if tag == expected {
            return Ok(Ok(payload));
        }
        if tag == Tag::Failed {
            return Ok(Err(Failure::decode(&payload, self.rank)));
        }
        Err(self.failed(format!(
            "sent a {tag:?} frame while this rank runs `{op}`: the ranks called different \
             collectives or transfers"
        )))
    }

    /// Closes the connection, so the peer's pending read ends at once.
    pub fn close(&self) {
        // Already closed by the peer is as good.
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// `CollectiveError::PeerFailed` for this peer.
    pub fn failed(&self, reason: String) -> Error {
        Error::Collective(CollectiveError::PeerFailed {
            rank: self.rank,
            reason: reason.into(),
        })
    }

    fn io_failure(&self, doing: &str, error: &std::io::Error) -> Error {
        let reason = match error.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                let timeout = self.stream.read_timeout().ok().flatten();
                format!(
                    "timed out {doing} after {:.1} s ({}): it is stuck, or never made the call \
                     this rank makes",
                    timeout.unwrap_or_default().as_secs_f64(),
                    self.timeout_env
                )
            }
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => {
                format!("closed its connection while this rank was {doing} (exited or crashed?)")
            }
            _ => format!("{doing} failed: {error}"),
        };
        self.failed(reason)
    }
}

/// A failure a [`Tag::Failed`] frame reports: which rank failed and whether the ranks are still
/// in step (a refused argument) or a rank is lost.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Failure {
    /// The ranks' buffers do not fit together; every rank got its answer, the group goes on.
    Mismatch(String),
    /// `rank` failed or was lost.
    Peer { rank: usize, reason: String },
}

impl Failure {
    /// The failure `error` of this rank `rank` as the others should see it.
    pub fn of(error: &Error, rank: usize) -> Failure {
        match error {
            Error::Collective(CollectiveError::MismatchedBuffers { reason, .. }) => {
                Failure::Mismatch(reason.to_string())
            }
            Error::Collective(CollectiveError::PeerFailed { rank, reason }) => Failure::Peer {
                rank: *rank,
                reason: reason.to_string(),
            },
            other => Failure::Peer {
                rank,
                reason: other.to_string(),
            },
        }
    }

    /// The payload of a [`Tag::Failed`] frame.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, rank, reason) = match self {
            Failure::Mismatch(reason) => (0u8, 0, reason),
            Failure::Peer { rank, reason } => (1u8, *rank as u64, reason),
        };
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&rank.to_le_bytes());
        bytes.extend_from_slice(reason.as_bytes());
        bytes
    }

    /// The failure in `payload`, sent by `sender` (blamed if the payload is malformed).
    pub fn decode(payload: &[u8], sender: usize) -> Failure {
        let malformed = || Failure::Peer {
            rank: sender,
            reason: "sent a malformed failure report".into(),
        };
        let (Some(&kind), Some(rank)) = (payload.first(), payload.get(1..9)) else {
            return malformed();
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(rank);
        let reason = String::from_utf8_lossy(&payload[9..]).into_owned();
        match kind {
            0 => Failure::Mismatch(reason),
            1 => Failure::Peer {
                rank: u64::from_le_bytes(word) as usize,
                reason,
            },
            _ => malformed(),
        }
    }

    /// The error a rank running `op` returns for this failure.
    pub fn into_error(self, op: &'static str) -> Error {
        match self {
            Failure::Mismatch(reason) => Error::Collective(CollectiveError::MismatchedBuffers {
                op,
                reason: reason.into(),
            }),
            Failure::Peer { rank, reason } => Error::Collective(CollectiveError::PeerFailed {
                rank,
                reason: reason.into(),
            }),
        }
    }

    /// Whether the ranks are no longer in step: a rank is lost.
    pub fn is_lost_peer(&self) -> bool {
        matches!(self, Failure::Peer { .. })
    }
}

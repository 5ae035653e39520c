//! How the ranks of a process group meet. Rank 0 listens on `MASTER_ADDR:MASTER_PORT`; every
//! other rank connects (retrying until the deadline, since rank 0 may start later), says its
//! rank, the world size it was given and the port of its own listener. Once every rank has
//! arrived, rank 0 sends each the others' addresses, and the ranks connect to each other (the
//! higher rank dials the lower), so `send`/`recv` go directly while collectives go through
//! rank 0. A rank that never arrives, comes twice or disagrees on the world size fails the
//! rendezvous for everyone, with a `CollectiveError::RendezvousFailed` naming it.

use super::env::{COLLECTIVE_TIMEOUT_ENV, ProcessGroupConfig, RENDEZVOUS_TIMEOUT_ENV};
use super::wire::{Peer, Tag};
use gpuworld_systems::error::CollectiveError;
use gpuworld_systems::{Error, Result};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long to wait between attempts to reach a listener that is not up yet, and between
/// polls of a listener for the next connection.
const RETRY: Duration = Duration::from_millis(20);

/// The connections of rank `config.rank` to every other rank, indexed by rank (`None` at its
/// own), once every rank has arrived.
pub(super) fn rendezvous(config: &ProcessGroupConfig) -> Result<Vec<Option<Peer>>> {
    let deadline = Instant::now() + config.rendezvous_timeout;
    let mut peers = if config.rank == 0 {
        host(config, deadline)?
    } else {
        join(config, deadline)?
    };
    for peer in peers.iter_mut().flatten() {
        peer.set_timeout(config.io_timeout, COLLECTIVE_TIMEOUT_ENV)
            .map_err(|e| failed(format!("cannot set the socket timeout: {e}")))?;
    }
    tracing::debug!(
        rank = config.rank,
        world = config.world_size,
        "process group complete"
    );
    Ok(peers)
}

/// Rank 0: waits for every rank, checks them, and tells each the world is complete.
fn host(config: &ProcessGroupConfig, deadline: Instant) -> Result<Vec<Option<Peer>>> {
    let addr = resolve(config, deadline)?;
    let listener = TcpListener::bind(addr)
        .map_err(|e| failed(format!("rank 0 cannot listen on {addr}: {e}")))?;
    let world = config.world_size;
    let mut arrived: Vec<Option<(Peer, u16)>> = (0..world).map(|_| None).collect();
    let mut waiting = world - 1;
    while waiting > 0 {
        let Some(stream) = accept(&listener, deadline)? else {
            let missing: Vec<usize> = (1..world).filter(|&r| arrived[r].is_none()).collect();
            let reason = format!(
                "rank{} {missing:?} of {world} never arrived at {addr} within {:.1} s \
                 (GPUWORLD_RENDEZVOUS_TIMEOUT_SECS)",
                if missing.len() == 1 { "" } else { "s" },
                config.rendezvous_timeout.as_secs_f64()
            );
            return Err(reject_all(&mut arrived, None, reason));
        };
        // Not a rank yet: blamed as rank 0's own failure if it turns out to be garbage.
        let mut peer = Peer::new(0, stream, remaining(deadline))
            .map_err(|e| failed(format!("cannot set up a connection: {e}")))?;
        let hello = match peer.recv(Tag::Hello, "rendezvous") {
            Ok(Ok(hello)) => hello,
            Ok(Err(failure)) => {
                tracing::warn!(
                    ?failure,
                    "ignoring a connection that sent a failure, no hello"
                );
                continue;
            }
            Err(error) => {
                // A probe or a rank that died mid-hello; a dead rank is then reported missing.
                tracing::warn!(%error, "ignoring a connection that sent no hello");
                continue;
            }
        };
        let Some((rank, their_world, port)) = parse_hello(&hello) else {
            let reason = "a process sent a malformed hello".to_owned();
            return Err(reject_all(&mut arrived, Some(&mut peer), reason));
        };
        let problem = if their_world != world {
            Some(format!(
                "rank {rank} was told the world has {their_world} ranks, rank 0 that it has {world}"
            ))
        } else if rank == 0 || rank >= world {
            Some(format!("a process claims rank {rank}, outside 1..{world}"))
        } else if arrived[rank].is_some() {
            Some(format!("rank {rank} arrived twice"))
        } else {
            None
        };
        if let Some(reason) = problem {
            return Err(reject_all(&mut arrived, Some(&mut peer), reason));
        }
        peer.rank = rank;
        arrived[rank] = Some((peer, port));
        waiting -= 1;
    }
    let mut table = Vec::new();
    for (peer, port) in arrived.iter().flatten() {
        let ip = peer
            .peer_ip()
            .map_err(|e| failed(format!("rank {} has no address: {e}", peer.rank)))?;
        let ip = ip.to_string();
        table.extend_from_slice(&port.to_le_bytes());
        table.push(ip.len() as u8);
        table.extend_from_slice(ip.as_bytes());
    }
    let mut peers: Vec<Option<Peer>> = arrived.into_iter().map(|a| a.map(|(p, _)| p)).collect();
    for peer in peers.iter_mut().flatten() {
        peer.send(Tag::World, &table).map_err(into_rendezvous)?;
    }
    Ok(peers)
}

/// Any rank but 0: reaches rank 0, learns the world, then connects to every other rank.
fn join(config: &ProcessGroupConfig, deadline: Instant) -> Result<Vec<Option<Peer>>> {
    let world = config.world_size;
    let addr = resolve(config, deadline)?;
    let stream = connect(addr, deadline, "rank 0")?;
    let mut root = Peer::new(0, stream, remaining(deadline)).map_err(|e| failed(e.to_string()))?;
    let local_ip = root.local_ip().map_err(|e| failed(e.to_string()))?;
    let listener = TcpListener::bind((local_ip, 0)).map_err(|e| {
        failed(format!(
            "rank {} cannot listen on {local_ip}: {e}",
            config.rank
        ))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| failed(e.to_string()))?
        .port();
    let mut hello = Vec::new();
    hello.extend_from_slice(&(config.rank as u32).to_le_bytes());
    hello.extend_from_slice(&(world as u32).to_le_bytes());
    hello.extend_from_slice(&port.to_le_bytes());
    root.send(Tag::Hello, &hello).map_err(into_rendezvous)?;
    // Rank 0 may have started up to a timeout after this rank, then waits a timeout for the
    // last rank: its answer, or its reason for giving up, can take that long.
    let answer = remaining(deadline) + config.rendezvous_timeout;
    root.set_timeout(answer, RENDEZVOUS_TIMEOUT_ENV)
        .map_err(|e| failed(format!("cannot set the socket timeout: {e}")))?;
    let table = match root.recv_any().map_err(into_rendezvous)? {
        (Tag::World, table) => parse_table(&table, world)
            .ok_or_else(|| failed("rank 0 sent a malformed list of ranks".into()))?,
        (Tag::Reject, reason) => {
            return Err(failed(format!(
                "rank 0 gave up: {}",
                String::from_utf8_lossy(&reason)
            )));
        }
        (tag, _) => return Err(failed(format!("rank 0 answered with a {tag:?} frame"))),
    };
    let mut peers: Vec<Option<Peer>> = (0..world).map(|_| None).collect();
    peers[0] = Some(root);
    // Dial the lower ranks, whose listeners were bound before rank 0 learned of them.
    for (lower, addr) in table.iter().enumerate().take(config.rank).skip(1) {
        let stream = connect(*addr, deadline, &format!("rank {lower}"))?;
        let mut peer =
            Peer::new(lower, stream, remaining(deadline)).map_err(|e| failed(e.to_string()))?;
        peer.send(Tag::MeshHello, &(config.rank as u32).to_le_bytes())
            .map_err(into_rendezvous)?;
        peers[lower] = Some(peer);
    }
    // Then wait for the higher ranks to dial this one.
    for _ in config.rank + 1..world {
        let missing = || {
            let missing: Vec<usize> = (config.rank + 1..world)
                .filter(|&r| peers[r].is_none())
                .collect();
            missing
        };
        let Some(stream) = accept(&listener, deadline)? else {
            return Err(failed(format!(
                "ranks {:?} never connected to rank {}",
                missing(),
                config.rank
            )));
        };
        let mut peer =
            Peer::new(0, stream, remaining(deadline)).map_err(|e| failed(e.to_string()))?;
        let hello = peer
            .recv(Tag::MeshHello, "rendezvous")
            .map_err(into_rendezvous)?;
        let rank = hello
            .ok()
            .as_deref()
            .and_then(|hello| hello.get(..4))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .filter(|&r| r > config.rank && r < world && peers[r].is_none())
            .ok_or_else(|| failed(format!("an unexpected process dialed rank {}", config.rank)))?;
        peer.rank = rank;
        peers[rank] = Some(peer);
    }
    Ok(peers)
}

/// The next connection to `listener`, or `None` once `deadline` has passed.
fn accept(listener: &TcpListener, deadline: Instant) -> Result<Option<TcpStream>> {
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(format!("cannot poll the listener: {e}")))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| failed(format!("cannot set up a connection: {e}")))?;
                return Ok(Some(stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(RETRY);
            }
            Err(e) => return Err(failed(format!("accepting a connection failed: {e}"))),
        }
    }
}

/// A connection to `addr`, retried until `deadline` while nobody listens there yet.
fn connect(addr: SocketAddr, deadline: Instant, whom: &str) -> Result<TcpStream> {
    loop {
        let attempt = remaining(deadline).min(Duration::from_secs(1));
        match TcpStream::connect_timeout(&addr, attempt) {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() >= deadline => {
                return Err(failed(format!(
                    "{whom} did not accept a connection at {addr} before the timeout \
                     (GPUWORLD_RENDEZVOUS_TIMEOUT_SECS): {e}"
                )));
            }
            Err(_) => std::thread::sleep(RETRY),
        }
    }
}

/// Rank 0's address, resolved (retried until `deadline`: a host name may not resolve yet).
fn resolve(config: &ProcessGroupConfig, deadline: Instant) -> Result<SocketAddr> {
    let target = (config.master_addr.as_str(), config.master_port);
    loop {
        let found = target.to_socket_addrs().map(|mut addrs| addrs.next());
        match found {
            Ok(Some(addr)) => return Ok(addr),
            _ if Instant::now() >= deadline => {
                return Err(failed(format!(
                    "MASTER_ADDR `{}` does not resolve to an address",
                    config.master_addr
                )));
            }
            _ => std::thread::sleep(RETRY),
        }
    }
}

/// Tells every rank that arrived (and `latecomer`) why the rendezvous failed; the error.
fn reject_all(
    arrived: &mut [Option<(Peer, u16)>],
    latecomer: Option<&mut Peer>,
    reason: String,
) -> Error {
    let others = arrived.iter_mut().flatten().map(|(peer, _)| peer);
    for peer in others.chain(latecomer) {
        // The rank may be gone already; the others still hear why.
        let _ = peer.send(Tag::Reject, reason.as_bytes());
    }
    failed(reason)
}

/// Rank, world size and mesh port of a hello.
fn parse_hello(hello: &[u8]) -> Option<(usize, usize, u16)> {
    let word = |at: usize| {
        hello
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let port = hello.get(8..10).map(|b| u16::from_le_bytes([b[0], b[1]]))?;
    Some((word(0)? as usize, word(4)? as usize, port))
}

/// The listeners of ranks 1.. by rank (index 0 unused), from rank 0's table.
fn parse_table(mut table: &[u8], world: usize) -> Option<Vec<SocketAddr>> {
    let mut addrs = vec![SocketAddr::from(([0, 0, 0, 0], 0))];
    while addrs.len() < world {
        let port = u16::from_le_bytes([*table.first()?, *table.get(1)?]);
        let len = *table.get(2)? as usize;
        let ip: IpAddr = std::str::from_utf8(table.get(3..3 + len)?)
            .ok()?
            .parse()
            .ok()?;
        addrs.push(SocketAddr::new(ip, port));
        table = &table[3 + len..];
    }
    Some(addrs)
}

fn remaining(deadline: Instant) -> Duration {
    // A zero timeout means "none" to the socket; a millisecond still ends a dead wait.
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn into_rendezvous(error: Error) -> Error {
    match error {
        Error::Collective(CollectiveError::PeerFailed { rank, reason }) => {
            failed(format!("rank {rank} {reason}"))
        }
        other => other,
    }
}

fn failed(reason: String) -> Error {
    Error::Collective(CollectiveError::RendezvousFailed {
        reason: reason.into(),
    })
}

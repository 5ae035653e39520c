//! The watchdog of a process group whose collectives run on the devices. A collective on a GPU
//! waits there for every rank: when a rank dies, or never joins, the others would wait forever
//! and so would every read behind them. A thread per group looks every few milliseconds at:
//! - the library's own asynchronous error (NCCL's, from its network transport): the group is
//!   aborted with it;
//! - each other rank's TCP connection, peeked without consuming a byte: a closed one means the
//!   rank exited. With nothing in flight the group is closed (later collectives fail naming the
//!   rank; results already made stay good); with collectives in flight it is aborted after a
//!   short grace, since they can no longer complete;
//! - the oldest collective in flight: past the collective timeout the group is aborted (a rank
//!   that is alive but never called it).
//!
//! An abort ends the collectives in flight, so the streams behind them move on, and every later
//! read or sync of a stream that ran one returns the reason: every pending call resolves.

use gpuworld_systems::cross_device::DeviceCollectives;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watchdog looks.
const PERIOD: Duration = Duration::from_millis(5);
/// How long collectives in flight may go on after a rank they need left: a rank that exits
/// right after its last collective leaves the others' copies of it finishing.
const GRACE: Duration = Duration::from_secs(1);

/// The thread watching one group; stops when dropped.
#[derive(Debug)]
pub(super) struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches `group` (this process's rank `rank`) and the connections to the other ranks,
    /// aborting collectives in flight for longer than `timeout`.
    pub fn start(
        rank: usize,
        group: &Arc<dyn DeviceCollectives>,
        peers: Vec<(usize, TcpStream)>,
        timeout: Duration,
    ) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let watched = Watched {
            rank,
            group: Arc::downgrade(group),
            peers,
            timeout,
            left: None,
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gpuworld-watchdog-{rank}"))
            .spawn(move || watched.run(&flag));
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(error) => {
                tracing::warn!(target: "gpuworld::collective", %error, "no watchdog thread: a rank that dies will hang this rank's collectives");
                None
            }
        };
        Watchdog { stop, thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!(target: "gpuworld::collective", "the process group's watchdog panicked: ranks that died were not watched");
        }
    }
}

/// What the watchdog's thread holds.
struct Watched {
    rank: usize,
    group: Weak<dyn DeviceCollectives>,
    peers: Vec<(usize, TcpStream)>,
    timeout: Duration,
    /// The first rank seen gone, and when.
    left: Option<(usize, Instant)>,
}

impl Watched {
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let Some(group) = self.group.upgrade() else {
                return;
            };
            if let Some(verdict) = self.look(&*group) {
                match verdict {
                    Verdict::Close(reason) => group.close(&reason),
                    Verdict::Abort(reason) => group.abort(&reason),
                }
                return;
            }
            drop(group);
            std::thread::sleep(PERIOD);
        }
    }

    /// What to do about the group now, if anything.
    fn look(&mut self, group: &dyn DeviceCollectives) -> Option<Verdict> {
        let health = group.health();
        if let Some(error) = health.error {
            return Some(Verdict::Abort(format!(
                "rank {}'s collective library reported an error: {error}",
                self.rank
            )));
        }
        if self.left.is_none() {
            self.left = self
                .peers
                .iter()
                .find(|(_, stream)| closed(stream))
                .map(|(rank, _)| (*rank, Instant::now()));
        }
        if let Some((rank, since)) = self.left {
            if health.in_flight == 0 {
                return Some(Verdict::Close(format!(
                    "rank {rank} left the group (its connection closed)"
                )));
            }
            if since.elapsed() >= GRACE {
                return Some(Verdict::Abort(format!(
                    "rank {rank} left the group (its connection closed) with {} collective(s) \
                     of rank {} in flight",
                    health.in_flight, self.rank
                )));
            }
        }
        match health.oldest {
            Some(oldest) if oldest >= self.timeout => Some(Verdict::Abort(format!(
                "a collective of rank {} waited {:.1} s for the other ranks (the collective \
                 timeout, {}): a rank never called it",
                self.rank,
                oldest.as_secs_f64(),
                super::COLLECTIVE_TIMEOUT_ENV
            ))),
            _ => None,
        }
    }
}

enum Verdict {
    Close(String),
    Abort(String),
}

/// Whether the other end of `stream` closed it (or it failed): a peek that finds the end of the
/// stream, without waiting and without taking a byte.
fn closed(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: the descriptor is live (owned by `stream`); the buffer holds one byte.
    let got = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if got > 0 {
        return false;
    }
    if got == 0 {
        return true;
    }
    let error = std::io::Error::last_os_error();
    !matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

//! The communicators made together, and their abort when a rank fails (issue 30).

use super::library::nccl;
use cudarc::driver::sys as cu;
use cudarc::nccl::sys;
use gpuworld_hal::cross_device::CollectiveHealth;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// stream that ran one, fail with the reason instead of hanging (issue 30).
/// The communicators made together by one `ncclCommInitAll`, one per rank. When one rank's
/// device fails, the others' collectives would wait for it forever on their GPUs: the failing
/// rank's backend aborts the clique (`ncclCommAbort` on every communicator, which ends the
/// collectives in flight), and every rank's later collectives, and its next read or sync of a
pub struct Clique {
    /// The communicators by rank, freed by the abort or, without one, by `Drop`. Enqueuing a
    /// collective holds the lock shared and checks `aborted` under it, so no call starts on an
    /// aborted communicator, and the abort waits (briefly) for calls that started before it.
    pub(super) comms: parking_lot::RwLock<Vec<sys::ncclComm_t>>,
    /// Why the clique was aborted, once it was.
    pub(super) aborted: OnceLock<Arc<str>>,
    /// Why the clique takes no more collectives (a rank left), once it does not; those in flight
    /// go on.
    pub(super) closed: OnceLock<Arc<str>>,
    /// For a clique spanning processes: the collectives queued and not yet seen complete, which
    /// the process group's watchdog looks at (`Clique::health`).
    pub(super) watched: Option<Watched>,
}

/// The collectives in flight of a clique spanning processes: an event recorded after each, and
/// when it was queued.
pub(super) struct Watched {
    /// The context of the rank's device, made current by the watchdog's thread to query events.
    pub(super) context: cu::CUcontext,
    pub(super) in_flight: parking_lot::Mutex<Vec<(cu::CUevent, Instant)>>,
}

/// How long an abort waits for collectives being enqueued to leave NCCL. One that stays longer is
/// blocked inside NCCL (its queue full of work that waits for the failed rank), which is what
/// `ncclCommAbort` from another thread is for: the abort then goes ahead under it.
pub(super) const ABORT_WAIT: Duration = Duration::from_secs(1);

// SAFETY: NCCL communicators may be used from any thread, one call at a time per communicator
// (each rank's is used by its runtime's ticking thread); `ncclCommAbort` may be called from
// another thread during a call, to end it. Each communicator is freed once: by the abort, or by
// `Drop` when there was none.
unsafe impl Send for Clique {}
// SAFETY: as above; shared references read the pointers under the lock.
unsafe impl Sync for Clique {}

impl std::fmt::Debug for Clique {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clique")
            .field("ranks", &self.comms.read().len())
            .field("aborted", &self.aborted.get())
            .finish()
    }
}

impl Clique {
    /// A clique of `comms`, by rank (one communicator, for a rank of a group across processes,
    /// with `watched` the context its collectives' events are queried in).
    pub(super) fn new(comms: Vec<sys::ncclComm_t>, watched: Option<cu::CUcontext>) -> Clique {
        Clique {
            comms: parking_lot::RwLock::new(comms),
            aborted: OnceLock::new(),
            closed: OnceLock::new(),
            watched: watched.map(|context| Watched {
                context,
                in_flight: parking_lot::Mutex::new(Vec::new()),
            }),
        }
    }

    /// Why the clique was aborted, if it was.
    pub fn aborted(&self) -> Option<Arc<str>> {
        self.aborted.get().cloned()
    }

    /// Why the clique takes no more collectives, if it does not: aborted, or closed.
    pub fn refused(&self) -> Option<Arc<str>> {
        self.aborted().or_else(|| self.closed.get().cloned())
    }

    /// Refuses later collectives with `reason`; those in flight go on.
    pub fn close(&self, reason: &str) {
        if self.closed.set(reason.into()).is_ok() {
            tracing::info!(target: "gpuworld::collective", %reason, "NCCL communicator closed");
        }
    }

    /// Records an event after the collective just queued on `stream`, for the watchdog.
    pub(super) fn watch_after(&self, stream: cu::CUstream) {
        let Some(watched) = &self.watched else { return };
        let mut event = std::ptr::null_mut();
        // SAFETY: creates an event in the current context (the caller's device's), recorded on
        // that context's stream; destroyed by `health` once passed, or by `Drop`.
        unsafe {
            let flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            if cu::cuEventCreate(&mut event, flags) != cu::CUresult::CUDA_SUCCESS {
                tracing::warn!(target: "gpuworld::collective", "no event after a collective: the watchdog cannot time it out");
                return;
            }
            let code = cu::cuEventRecord(event, stream);
            if code != cu::CUresult::CUDA_SUCCESS {
                cu::cuEventDestroy_v2(event);
                tracing::warn!(target: "gpuworld::collective", ?code, "no event after a collective: the watchdog cannot time it out");
                return;
            }
        }
        watched.in_flight.lock().push((event, Instant::now()));
    }

    /// The collectives in flight and NCCL's asynchronous error, for the watchdog.
    pub(super) fn health(&self, slot: usize) -> CollectiveHealth {
        let mut health = CollectiveHealth::default();
        if let Some(watched) = &self.watched {
            crate::loader::bind_context(watched.context);
            let mut in_flight = watched.in_flight.lock();
            // SAFETY: the events were made by `watch_after` and are destroyed only here.
            in_flight.retain(|&(event, _)| unsafe {
                if cu::cuEventQuery(event) == cu::CUresult::CUDA_ERROR_NOT_READY {
                    true
                } else {
                    cu::cuEventDestroy_v2(event);
                    false
                }
            });
            health.in_flight = in_flight.len();
            health.oldest = in_flight.first().map(|(_, queued)| queued.elapsed());
        }
        let (Ok(nccl), Some(comms)) = (nccl(), self.live(slot)) else {
            return health;
        };
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live while the lock is held; `state` is an out-pointer.
        let code = unsafe { (nccl.comm_get_async_error)(comms[slot], &mut state) };
        drop(comms);
        health.error = nccl
            .check(code, "ncclCommGetAsyncError")
            .and_then(|()| match state {
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
                failed => nccl.check(failed, "NCCL"),
            })
            .err();
        health
    }

    /// Aborts every communicator of the clique, once: collectives in flight on any rank end
    /// (their results are undefined) and later ones are refused with `reason`.
    pub fn abort(&self, reason: &str) {
        if self.aborted.set(reason.into()).is_err() {
            return;
        }
        tracing::error!(target: "gpuworld::collective", %reason, "NCCL communicators aborted");
        let Ok(nccl) = nccl() else { return };
        // No call starts once the flag is up; wait for those that started before it.
        let exclusive = self.comms.try_write_for(ABORT_WAIT);
        let comms: Vec<sys::ncclComm_t> = match &exclusive {
            Some(comms) => comms.to_vec(),
            None => {
                tracing::warn!(target: "gpuworld::collective", "a collective is blocked inside NCCL: aborting under it");
                self.comms.read().to_vec()
            }
        };
        for comm in comms {
            // SAFETY: made by `ncclCommInitAll` and freed only here (the flag, set once above,
            // keeps `Drop` from freeing it again); a call still inside NCCL on it is what the
            // abort ends.
            let code = unsafe { (nccl.comm_abort)(comm) };
            if let Err(message) = nccl.check(code, "ncclCommAbort") {
                tracing::warn!(target: "gpuworld::collective", %message, "abort failed");
            }
        }
    }

    /// The raw communicator of `rank`, under the lock, unless the clique was aborted.
    pub(super) fn live(
        &self,
        slot: usize,
    ) -> Option<parking_lot::RwLockReadGuard<'_, Vec<sys::ncclComm_t>>> {
        let comms = self.comms.read();
        (self.refused().is_none() && slot < comms.len()).then_some(comms)
    }
}

impl Drop for Clique {
    fn drop(&mut self) {
        if let Some(watched) = &mut self.watched {
            crate::loader::bind_context(watched.context);
            for (event, _) in watched.in_flight.get_mut().drain(..) {
                // SAFETY: made by `watch_after`; destroying a pending event is allowed (its
                // resources go once it passes).
                unsafe { cu::cuEventDestroy_v2(event) };
            }
        }
        if self.aborted.get().is_some() {
            // The abort freed them.
            return;
        }
        let Ok(nccl) = nccl() else { return };
        // A closed group lost a rank: a destroy could wait for it, an abort does not.
        let free = match self.closed.get() {
            Some(_) => nccl.comm_abort,
            None => nccl.comm_destroy,
        };
        for comm in self.comms.get_mut().iter() {
            // SAFETY: made by `ncclCommInitAll` or `ncclCommInitRank`, not aborted, and no rank
            // holds it any more.
            unsafe { free(*comm) };
        }
    }
}

/// A clique this backend ran collectives in, and on which streams.
#[derive(Debug)]
pub(crate) struct KnownClique {
    pub(super) clique: std::sync::Weak<Clique>,
    pub(super) streams: Vec<usize>,
    /// Whether its abort was noticed (or caused) here already.
    pub(super) reported: bool,
}

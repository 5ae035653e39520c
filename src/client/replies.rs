//! Replies a caller does not block on: a `ReadTicket` a frame loop checks (`is_ready`,
//! `try_take`: they never tick), and `ReplyFuture`, what `read_async` and `sync_async` return.
//! Both are `Send + Sync`, so they can live in a resource or a component. Under
//! `Driver::Manual` nobody ticks but the host, so a future polled again for a reply that is not
//! there, with no tick since its last poll, drives the runtime itself, like a blocking call:
//! `block_on(read_async(..))` completes instead of hanging mute, while a host loop that ticks
//! between its polls is never ticked behind its back.

use super::shared::Shared;
use futures_channel::oneshot;
use gpuworld_systems::{Backend, Error, HostBytes, Result};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

/// Where a reply is: on its way, arrived, or handed over.
enum State<T> {
    Waiting(oneshot::Receiver<Result<T>>),
    Arrived(Result<T>),
    Taken,
}

/// A reply the tick sends, checked without blocking; the mutex makes it `Sync` (a oneshot
/// receiver can only be asked for its value mutably).
struct Reply<T> {
    state: Mutex<State<T>>,
}

impl<T> Reply<T> {
    fn waiting(receiver: oneshot::Receiver<Result<T>>) -> Reply<T> {
        Reply {
            state: Mutex::new(State::Waiting(receiver)),
        }
    }

    fn arrived(result: Result<T>) -> Reply<T> {
        Reply {
            state: Mutex::new(State::Arrived(result)),
        }
    }

    /// Moves a reply that came from the channel into the state; whether one is there to take.
    fn is_ready(&self) -> bool {
        let mut state = self.state.lock();
        if let State::Waiting(receiver) = &mut *state {
            match receiver.try_recv() {
                Ok(Some(reply)) => *state = State::Arrived(reply),
                Ok(None) => return false,
                Err(oneshot::Canceled) => *state = State::Arrived(Err(Error::Disconnected)),
            }
        }
        matches!(*state, State::Arrived(_))
    }

    fn try_take(&self) -> Option<Result<T>> {
        if !self.is_ready() {
            return None;
        }
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, State::Taken) {
            State::Arrived(reply) => Some(reply),
            other => {
                *state = other;
                None
            }
        }
    }

    /// The reply if it came, else registers `cx`'s waker with the channel.
    fn poll(&self, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut state = self.state.lock();
        if let State::Waiting(receiver) = &mut *state {
            match Pin::new(receiver).poll(cx) {
                Poll::Ready(reply) => {
                    *state = State::Arrived(reply.unwrap_or(Err(Error::Disconnected)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        match std::mem::replace(&mut *state, State::Taken) {
            State::Arrived(reply) => Poll::Ready(reply),
            // Polled after completion: the reply was handed over already.
            State::Taken | State::Waiting(_) => Poll::Ready(Err(Error::Disconnected)),
        }
    }
}

/// A readback a frame loop checks without blocking and without ticking: the tick that sees the
/// bytes arrive completes it. `Send + Sync`, so it fits in a resource or a component.
pub struct ReadTicket {
    reply: Reply<Vec<HostBytes>>,
}

impl ReadTicket {
    pub(super) fn waiting(receiver: oneshot::Receiver<Result<Vec<HostBytes>>>) -> ReadTicket {
        ReadTicket {
            reply: Reply::waiting(receiver),
        }
    }

    /// Whether the bytes (or the read's error) arrived and were not taken yet. Never ticks.
    pub fn is_ready(&self) -> bool {
        self.reply.is_ready()
    }

    /// The bytes, one `HostBytes` per source, or the read's error, once they arrived; `None`
    /// before, and after they were taken. Never ticks.
    pub fn try_take(&mut self) -> Option<Result<Vec<HostBytes>>> {
        self.reply.try_take()
    }
}

impl std::fmt::Debug for ReadTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadTicket")
            .field("ready", &self.is_ready())
            .finish()
    }
}

/// What a future polled under `Driver::Manual` calls to tick in its caller's place.
pub(super) trait DriveOnPoll: Send + Sync {
    /// Whether the runtime is driven by hand (nobody else ticks).
    fn is_manual(&self) -> bool;
    /// Number of ticks finished so far.
    fn ticks_finished(&self) -> u64;
    /// Ticks once if the runtime is driven by hand and nobody holds it; whether it ticked. When
    /// another thread holds it, `waker` is woken once that thread lets go.
    fn drive_once(&self, waker: &Waker) -> bool;
}

impl<B: Backend> DriveOnPoll for Shared<B> {
    fn is_manual(&self) -> bool {
        self.manual.load(Ordering::Acquire)
    }

    fn ticks_finished(&self) -> u64 {
        self.published.ticks_finished()
    }

    fn drive_once(&self, waker: &Waker) -> bool {
        if !self.is_manual() {
            return false;
        }
        let Some(mut runtime) = self.runtime.try_lock_or_park(waker) else {
            // The holder's wait on the device ends, and its next tick takes our command.
            self.inbox.request_tick();
            return false;
        };
        let wait = self.drivers.policy.manual_device_wait;
        runtime.tick_awaiting_replies(wait);
        if runtime.has_replies_in_flight() {
            let inbox = &self.inbox;
            runtime.release_and_wait_for_device(wait, &|| inbox.needs_tick());
        }
        true
    }
}

/// The future of [`ComputeClient::read_async`](super::ComputeClient::read_async) and
/// [`ComputeClient::sync_async`](super::ComputeClient::sync_async): `Send + Sync + 'static`.
/// Under `Driver::Manual`, a poll that finds no reply asks to be polled again, and a poll that
/// finds no reply *and no tick since the future's previous poll* ticks the runtime once (when
/// no other thread holds it): awaiting it with nobody ticking (`block_on`) drives the runtime as
/// a blocking call does, while a loop that ticks between polls is never ticked behind its back.
/// Beside a device thread a poll never ticks.
pub struct ReplyFuture<T> {
    reply: Reply<T>,
    driver: Option<Weak<dyn DriveOnPoll>>,
    /// The runtime's finished ticks at this future's last poll.
    ticks_at_last_poll: Option<u64>,
}

impl<T> std::fmt::Debug for ReplyFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyFuture")
            .field("ticks_at_last_poll", &self.ticks_at_last_poll)
            .finish_non_exhaustive()
    }
}

impl<T> ReplyFuture<T> {
    pub(super) fn waiting<B: Backend>(
        receiver: oneshot::Receiver<Result<T>>,
        shared: &std::sync::Arc<Shared<B>>,
    ) -> ReplyFuture<T> {
        let shared: std::sync::Arc<dyn DriveOnPoll> = shared.clone();
        ReplyFuture {
            reply: Reply::waiting(receiver),
            driver: Some(std::sync::Arc::downgrade(&shared)),
            ticks_at_last_poll: None,
        }
    }

    pub(super) fn failed(error: Error) -> ReplyFuture<T> {
        ReplyFuture {
            reply: Reply::arrived(Err(error)),
            driver: None,
            ticks_at_last_poll: None,
        }
    }
}

// Nothing in a `ReplyFuture` is pinned in place: the reply sits behind its mutex.
impl<T> Unpin for ReplyFuture<T> {}

impl<T> Future for ReplyFuture<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        if let Poll::Ready(reply) = this.reply.poll(cx) {
            return Poll::Ready(reply);
        }
        let Some(driver) = this.driver.as_ref().and_then(Weak::upgrade) else {
            // The runtime is gone: the channel says so at the next poll.
            return Poll::Pending;
        };
        if !driver.is_manual() {
            // A device thread ticks, and the reply wakes us.
            return Poll::Pending;
        }
        let ticks = driver.ticks_finished();
        if this.ticks_at_last_poll == Some(ticks) {
            // Nobody ticked since our last poll: we are what waits, so we tick, or, while
            // another thread holds the runtime, wait to be woken when it lets go.
            if !driver.drive_once(cx.waker()) {
                return Poll::Pending;
            }
            if let Poll::Ready(reply) = this.reply.poll(cx) {
                return Poll::Ready(reply);
            }
        }
        this.ticks_at_last_poll = Some(driver.ticks_finished());
        // Nobody may tick for us under the manual driver: ask to be polled again.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

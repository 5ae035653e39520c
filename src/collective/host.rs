//! The host implementation of collectives (cpu, sim and wgpu): each rank's input is read back on
//! its own stream, the result is computed once on the host when every input has arrived, and
//! each rank's share of it is written on its own stream, held at ingest until then.

use crate::client::FromRead;
use gpuworld_systems::arriving::{Arriving, ArrivingSource};
use gpuworld_systems::{Error, HostBytes, Result};
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Computes a collective's result from the ranks' inputs, in rank order.
pub(crate) type Combine = Box<dyn FnOnce(&[HostBytes]) -> Result<Vec<u8>> + Send>;

/// The wakers of every rank's write that waits for a collective's result: a read's reply wakes
/// them all, so that whichever rank polls next can compute the result, and each rank's write is
/// taken once it is there.
#[derive(Default)]
struct Waiting(Mutex<Vec<Waker>>);

impl Waiting {
    fn register(&self, waker: &Waker) {
        let mut wakers = self.0.lock();
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }

    fn wake_all(&self) {
        for waker in std::mem::take(&mut *self.0.lock()) {
            waker.wake();
        }
    }
}

/// The waker the inputs' reads are polled with: wakes every waiting rank.
struct WakeAll(Arc<Waiting>);

impl Wake for WakeAll {
    fn wake(self: Arc<Self>) {
        self.0.wake_all();
    }
}

/// The inputs of one collective as they arrive, and its result once computed.
pub(crate) struct Gathered {
    reads: Vec<Option<FromRead>>,
    arrived: Vec<HostBytes>,
    combine: Option<Combine>,
    /// The first input that failed, kept until every read has answered.
    failed: Option<Error>,
    result: Option<Result<Arc<[u8]>>>,
    /// The ranks' wakers, woken by any read's reply and once the result is computed.
    waiting: Arc<Waiting>,
    /// `waiting` as a waker, for polling the reads.
    wake_all: Waker,
}

impl Gathered {
    /// A collective over the inputs `reads` will deliver (one binding each), shared by the
    /// ranks' writes.
    pub(crate) fn new(reads: Vec<FromRead>, combine: Combine) -> Arc<Mutex<Gathered>> {
        let n = reads.len();
        let waiting = Arc::new(Waiting::default());
        Arc::new(Mutex::new(Gathered {
            wake_all: Waker::from(Arc::new(WakeAll(waiting.clone()))),
            waiting,
            reads: reads.into_iter().map(Some).collect(),
            arrived: std::iter::repeat_with(HostBytes::default).take(n).collect(),
            combine: Some(combine),
            failed: None,
            result: None,
        }))
    }

    /// The result once every input's read has answered: the first failed input's error if one
    /// failed. Waiting for every answer, failed or not, means each rank's own read has
    /// completed before its write reports the failure, so that read cannot take the fault the
    /// write records on the rank's stream.
    fn poll(&mut self) -> Poll<Result<Arc<[u8]>>> {
        if self.result.is_none() {
            let mut waiting = false;
            let mut cx = Context::from_waker(&self.wake_all);
            for (read, arrived) in self.reads.iter_mut().zip(&mut self.arrived) {
                let Some(pending) = read else { continue };
                match pending.poll(&mut cx) {
                    Poll::Pending => waiting = true,
                    Poll::Ready(Ok(mut bytes)) => {
                        *arrived = bytes.pop().unwrap_or_default();
                        *read = None;
                    }
                    Poll::Ready(Err(error)) => {
                        self.failed.get_or_insert(error);
                        *read = None;
                    }
                }
            }
            if waiting {
                return Poll::Pending;
            }
            let combine = match self.failed.take() {
                Some(error) => Err(error),
                None => self.combine.take().ok_or(Error::Disconnected),
            };
            self.result = Some(combine.and_then(|f| f(&self.arrived)).map(Arc::from));
            // The inputs are no longer needed: their staging memory goes back now.
            self.arrived.clear();
            // The other ranks may have polled while this one held the result's lock.
            self.waiting.wake_all();
        }
        match &self.result {
            Some(result) => Poll::Ready(result.clone()),
            None => Poll::Pending,
        }
    }
}

/// One rank's share of a collective's result: the bytes its write waits for.
pub(crate) struct Share {
    gathered: Arc<Mutex<Gathered>>,
    waiting: Arc<Waiting>,
    range: Range<usize>,
}

impl Share {
    /// The bytes `range` of `gathered`'s result.
    pub(crate) fn arriving(gathered: &Arc<Mutex<Gathered>>, range: Range<usize>) -> Arriving {
        let waiting = gathered.lock().waiting.clone();
        Arriving::new(Share {
            gathered: gathered.clone(),
            waiting,
            range,
        })
    }
}

impl ArrivingSource for Share {
    fn poll_bytes(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostBytes>> {
        // Registered before trying the lock, so that the rank holding it wakes this one.
        self.waiting.register(cx.waker());
        // Another rank's ingest may hold it, possibly further up this very thread (a runtime
        // ticked while driving another): try again when woken rather than wait.
        let Some(mut gathered) = self.gathered.try_lock() else {
            return Poll::Pending;
        };
        gathered.poll().map(|result| {
            result.and_then(|bytes| {
                bytes
                    .get(self.range.clone())
                    .map(|share| {
                        // Copied on every core, as large uploads are staged.
                        let mut bytes = HostBytes::from_vec(vec![0; share.len()]);
                        gpuworld_systems::staging::copy_in_parallel(&mut bytes, share);
                        bytes
                    })
                    .ok_or(Error::Disconnected)
            })
        })
    }
}

//! Moving data between runtimes (devices, or backends): `to_client` and `to_client_into`.
//!
//! Between two runtimes of a backend with a `CrossDevice::peer_transfer` a transfer stays on the
//! devices (CUDA's: `cuMemcpyPeerAsync` on the source's stream, the destination's stream waiting on
//! its event, `gpuworld_cuda`'s `peer.rs`). Otherwise it is two tasks. On the source it is a read
//! on the caller's stream, so alignment orders it after the handle's last write on any stream, and
//! the source runtime's GC stage answers it as it answers every read; a backend that copies to host
//! memory itself (cpu) reads into the destination's staging (`Backend::read_for`), so a CUDA
//! destination gets page-locked bytes it uploads with no further host copy. On the destination it
//! is a write of the arriving bytes on the destination client's stream: ingest holds it, with every
//! command after it, until the bytes are there, so every later use on the destination sees them.
//! Both calls return at once.
//!
//! Inside a capture on the source's client, the transfer is recorded ([`TransferTo`]) and runs
//! once as the warm-up; every replay of the graph issues it again the same way. The destination
//! range is pinned on its runtime while the graph can replay into it.

use super::ComputeClient;
use super::shared::Shared;
use futures_channel::oneshot;
use gpuworld_systems::arriving::{Arriving, ArrivingSource};
use gpuworld_systems::cross_device::Drive;
use gpuworld_systems::graph::TransferOut;
use gpuworld_systems::inbox::{Command, Op, PinHolder, ReadReply};
use gpuworld_systems::staging::StagingAllocator;
use gpuworld_systems::{Backend, Binding, Error, Handle, HostBytes, Result, RuntimeId};
use std::any::TypeId;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

/// A read in flight on a source runtime, as its destination sees it.
pub(crate) struct FromRead {
    receiver: oneshot::Receiver<ReadReply>,
    drive: Drive,
}

impl FromRead {
    /// The bytes of each binding read, once the source runtime has answered; while it has not,
    /// ticks it if it is driven by hand and nobody holds it, and leaves `cx`'s waker with the
    /// reply, which the source's tick wakes.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Vec<HostBytes>>> {
        for attempt in 0..2 {
            match Pin::new(&mut self.receiver).poll(cx) {
                Poll::Ready(Ok(reply)) => return Poll::Ready(reply),
                Poll::Ready(Err(oneshot::Canceled)) => {
                    return Poll::Ready(Err(Error::Disconnected));
                }
                Poll::Pending if attempt == 0 => (self.drive)(),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }
}

/// The bytes of a one-binding read, as a destination's write waits for them.
struct ReadArrival(FromRead);

impl ArrivingSource for ReadArrival {
    fn poll_bytes(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostBytes>> {
        self.0
            .poll(cx)
            .map(|reply| reply.and_then(|mut bytes| bytes.pop().ok_or(Error::Disconnected)))
    }
}

impl<B: Backend> ComputeClient<B> {
    /// A new handle on `dst`'s device holding a copy of `src`; returns at once. The copy is ordered
    /// after every earlier write of `src` (on any stream of this runtime) and before every later
    /// use of the new handle on `dst`. Between CUDA devices it is a device copy
    /// (`cuMemcpyPeerAsync`, events on both sides); otherwise it goes through host memory
    /// (page-locked on CUDA), between devices of one backend or of two. A failure on the way (a
    /// released source, a device fault on the source's stream, a source runtime gone) is a fault of
    /// `dst`'s stream, which its next read or sync reports.
    pub fn to_client<C: Backend>(
        &self,
        src: impl Into<Binding>,
        dst: &ComputeClient<C>,
    ) -> Result<Handle> {
        let src = src.into();
        let (start, end) = src.validate(self.shared.id)?;
        let handle = dst.empty(end - start);
        self.to_client_into(src, dst, &handle)?;
        Ok(handle)
    }

    /// Copies `src` into `dst_range` of `dst`'s device, ordered as [`ComputeClient::to_client`];
    /// `BindingError::WriteTooLarge` when `src` is larger than the range.
    pub fn to_client_into<C: Backend>(
        &self,
        src: impl Into<Binding>,
        dst: &ComputeClient<C>,
        dst_range: impl Into<Binding>,
    ) -> Result<()> {
        let src = src.into();
        let dst_range = dst_range.into();
        let (start, end) = src.validate(self.shared.id)?;
        dst.check_write(&dst_range, (end - start) as usize)?;
        if self.shared.inbox.capturing_here() {
            let target = Arc::new(TransferTo::new(self, src, dst, dst_range));
            let run = self
                .shared
                .inbox
                .record_transfer(src, self.stream_id(), target);
            // A dry capture records the transfer without running it.
            if run == Some(false) {
                return Ok(());
            }
            return self.transfer_now(src, dst, dst_range, Past::Capture);
        }
        self.transfer_now(src, dst, dst_range, Past::Nothing)
    }

    /// Queues the parts of a checked transfer: a peer copy between runtimes of a backend that
    /// has them, a read and an arriving write otherwise; `past` says whether they skip a
    /// capture open on either runtime (a graph's transfer).
    fn transfer_now<C: Backend>(
        &self,
        src: Binding,
        dst: &ComputeClient<C>,
        dst_range: Binding,
        past: Past,
    ) -> Result<()> {
        // Between two runtimes of one backend that copies between its devices itself (CUDA's
        // peer copies), the copy stays on the devices. `TypeId` only tells whether both clients
        // are of one backend, which the backend's parts assume; nothing is downcast.
        if TypeId::of::<B>() == TypeId::of::<C>()
            && self.capabilities().peer_transfer
            && let Some(peer) = B::peer_transfer(self.drive(), dst.drive())
        {
            // Each part is pushed after the part it waits for.
            dst.push_past(dst.native(peer.destination, dst_range), past);
            self.push_past(self.native(peer.copy, src), past);
            dst.push_past(dst.native(peer.arrival, dst_range), past);
            return Ok(());
        }
        // The read lands in the destination's staging where the source backend copies to host
        // memory itself (cpu): page-locked on CUDA, which then uploads it with no host copy.
        let receiver = self.enqueue_read_past(&[src], Some(dst.shared.staging.clone()), past)?;
        let read = FromRead {
            receiver,
            drive: self.drive(),
        };
        let bytes = Arriving::new(ReadArrival(read));
        dst.push_past(dst.arriving(dst_range, bytes), past);
        Ok(())
    }

    /// Reads `sources` on this client's stream for another runtime, which polls the result; the
    /// bytes land in `staging` where the backend can put them there (`Backend::read_for`).
    pub(crate) fn read_from_other_runtime(
        &self,
        sources: &[Binding],
        staging: Option<Arc<dyn StagingAllocator>>,
    ) -> Result<FromRead> {
        let receiver = self.enqueue_read_into(sources, staging)?;
        Ok(FromRead {
            receiver,
            drive: self.drive(),
        })
    }

    /// Queues a write of `bytes` into `dst` (already checked) on this client's stream, held at
    /// ingest until they arrive.
    pub(crate) fn write_arriving(&self, dst: Binding, bytes: Arriving) {
        self.shared.inbox.push(self.arriving(dst, bytes));
    }

    /// The write of arriving `bytes` into `dst` on this client's stream.
    fn arriving(&self, dst: Binding, bytes: Arriving) -> Command {
        Command::WriteArriving {
            dst,
            bytes,
            stream: self.stream_id(),
        }
    }

    /// Queues `work`, which the backend runs itself over `buffers` (already checked), on this
    /// client's stream (peer transfers and device collectives).
    pub(crate) fn push_native(
        &self,
        work: gpuworld_systems::backend::NativeWork,
        buffers: smallvec::SmallVec<[Binding; 4]>,
    ) {
        self.shared.inbox.push(Command::Native {
            work,
            buffers,
            stream: self.stream_id(),
        });
    }

    /// One part of a peer transfer over `binding`, on this client's stream.
    fn native(&self, work: gpuworld_systems::backend::NativeWork, binding: Binding) -> Command {
        Command::Native {
            work,
            buffers: smallvec::smallvec![binding],
            stream: self.stream_id(),
        }
    }

    /// Queues `command`, past a capture open on this inbox where `past` says so.
    pub(super) fn push_past(&self, command: Command, past: Past) {
        match past {
            Past::Nothing => self.shared.inbox.push(command),
            Past::Capture => self.shared.inbox.push_uncaptured(command),
            Past::Replay => {
                (self.shared.inbox).push_uncaptured(Command::ForGraph(Box::new(command)))
            }
        }
    }

    /// Ticks this runtime when it is driven by hand and nobody holds it: a destination waiting on
    /// it must not depend on its owner ticking it.
    fn drive(&self) -> Drive {
        let shared: Weak<Shared<B>> = Arc::downgrade(&self.shared);
        Box::new(move || {
            if let Some(shared) = shared.upgrade()
                && shared.manual.load(Ordering::Acquire)
                && let Some(mut runtime) = shared.runtime.try_lock()
            {
                runtime.tick();
            }
        })
    }
}

/// Whether a command skips a capture open on its inbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Past {
    /// Recorded by a capture like any command.
    Nothing,
    /// Queued past it: a part of a transfer captured now (the capture's own run, the user's).
    Capture,
    /// Queued past it as the graph's own command ([`Command::ForGraph`]): a part of a transfer
    /// a replay issues, which may name a handle the user released while the graph pins it.
    Replay,
}

/// A transfer captured in a graph, as its replays issue it again: the source client (with the
/// capturing stream), the source range, and the destination client and range, which it keeps
/// pinned on the destination's runtime while it lives.
struct TransferTo<B: Backend, C: Backend> {
    source: ComputeClient<B>,
    src: Binding,
    dst: ComputeClient<C>,
    dst_range: Binding,
}

impl<B: Backend, C: Backend> TransferTo<B, C> {
    /// The transfer of `src` into `dst_range` of `dst`, its destination pinned from now.
    fn new(
        source: &ComputeClient<B>,
        src: Binding,
        dst: &ComputeClient<C>,
        dst_range: Binding,
    ) -> TransferTo<B, C> {
        let handle = dst_range.handle();
        dst.shared.inbox.push_uncaptured(Command::Op(Op::Pin {
            handle,
            holder: PinHolder::Graph,
        }));
        TransferTo {
            source: source.held_by_graph(),
            src,
            dst: dst.held_by_graph(),
            dst_range,
        }
    }
}

impl<B: Backend, C: Backend> std::fmt::Debug for TransferTo<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferTo")
            .field("src", &self.src)
            .field("dst_runtime", &self.dst.shared.id)
            .field("dst_range", &self.dst_range)
            .finish()
    }
}

impl<B: Backend, C: Backend> TransferOut for TransferTo<B, C> {
    fn issue(&self) -> Result<()> {
        self.source.make_room();
        self.source
            .transfer_now(self.src, &self.dst, self.dst_range, Past::Replay)
    }

    fn destination(&self) -> (RuntimeId, Binding) {
        (self.dst.shared.id, self.dst_range)
    }
}

impl<B: Backend, C: Backend> Drop for TransferTo<B, C> {
    /// The graph is gone: the destination range may be reused once the user lets go of it.
    fn drop(&mut self) {
        let handle = self.dst_range.handle();
        self.dst
            .shared
            .inbox
            .push_uncaptured(Command::Op(Op::Unpin {
                handle,
                holder: PinHolder::Graph,
            }));
    }
}

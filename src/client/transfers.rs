//! Host↔device transfers of the client: handles created empty or from bytes, writes, reads that
//! hand back the memory the device copied into, and the staging memory (page-locked on CUDA) that
//! large uploads go through in chunks, pipelined with the device's copies.

use super::{ComputeClient, ReadTicket, ReplyFuture};
use futures_channel::oneshot;
use gpuworld_systems::error::{BindingError, LayoutError};
use gpuworld_systems::inbox::{Command, Op, ReadReply};
use gpuworld_systems::staging::{StagingAllocator, copy_in_parallel, stage_in_parallel};
use gpuworld_systems::{Backend, Binding, Error, Handle, HostBytes, Result};
use std::sync::Arc;

/// Host copies at least this large go through staging memory, in chunks; a smaller one is copied
/// to the heap in one piece, where taking staging memory would cost more than it saves.
const STAGE_FROM: usize = 1 << 20;

/// Bytes per chunk of a staged upload. Each chunk is a write of its own, so the device copies
/// chunk k while the caller fills chunk k+1: large enough that a write's own cost (a command, an
/// event) is small beside its copy, small enough that the first copy starts early.
const CHUNK: usize = 8 << 20;

impl<B: Backend> ComputeClient<B> {
    /// A new handle of `size` bytes whose contents are undefined until written. Never ticks.
    pub fn empty(&self, size: u64) -> Handle {
        self.new_handle(size, None)
    }

    /// A new handle holding `data` (a `Vec<u8>`, or [`HostBytes`] from
    /// [`ComputeClient::reserve_staging`], which page-locked backends copy from directly). Never
    /// ticks.
    pub fn create(&self, data: impl Into<HostBytes>) -> Handle {
        let data = data.into();
        self.new_handle(data.len() as u64, Some(data))
    }

    /// A new handle holding a copy of `data`. From 1 MiB on the copy goes through staging memory
    /// in chunks, each uploaded while the next is copied. Never ticks.
    pub fn create_from_slice(&self, data: &[u8]) -> Handle {
        if data.len() < STAGE_FROM {
            return self.create(data.to_vec());
        }
        let handle = self.empty(data.len() as u64);
        if let Err(error) = self.write_in_chunks(handle.binding(), data) {
            // A fresh handle's binding spans exactly `data`: no user or device can cause this.
            unreachable!(
                "a fresh handle of {} bytes refused them: {error}",
                data.len()
            );
        }
        handle
    }

    /// A new handle holding a copy of `data`, any plain-old-data slice (`&[f32]`, `&[u32]`, a
    /// `#[derive(Pod)]` struct), as [`ComputeClient::create_from_slice`] holds its bytes; the
    /// typed sibling of reads' [`ComputeClient::read_one_as`]. Never ticks.
    pub fn create_from_pod<T: bytemuck::Pod>(&self, data: &[T]) -> Handle {
        self.create_from_slice(bytemuck::cast_slice(data))
    }

    /// A new handle holding a copy of `data`, copied once into staging memory the device reads
    /// directly (page-locked on CUDA) instead of into a heap buffer that the backend stages again.
    /// Never ticks.
    pub fn create_from_slice_pinned(&self, data: &[u8]) -> Handle {
        self.create(self.staged_copy(data))
    }

    /// A copy of `data` in staging memory.
    fn staged_copy(&self, data: &[u8]) -> HostBytes {
        let mut bytes = self.take_staging(data.len());
        if bytes.is_page_locked() {
            // Only the device's DMA reads it: stores that bypass the cache.
            stage_in_parallel(&mut bytes, data);
        } else {
            copy_in_parallel(&mut bytes, data);
        }
        bytes
    }

    /// `len` bytes of the backend's staging memory, or of the heap when it has none to lend.
    fn take_staging(&self, len: usize) -> HostBytes {
        self.shared
            .staging
            .take(len)
            .unwrap_or_else(|| HostBytes::from_vec(vec![0; len]))
    }

    /// Writes `data` to the start of `dst` (already checked) as one write per chunk, each copied
    /// into staging just before it is pushed. The writes follow each other on this stream, so
    /// together they keep the place of a single write in stream order.
    fn write_in_chunks(&self, dst: Binding, data: &[u8]) -> Result<()> {
        let dst = dst.slice(0..data.len() as u64)?;
        for (part, chunk) in dst.chunks(CHUNK as u64)?.zip(data.chunks(CHUNK)) {
            self.push_write(part, self.staged_copy(chunk));
        }
        Ok(())
    }

    /// Host buffers of `sizes` bytes in the memory the device copies fastest (page-locked on
    /// CUDA; ordinary heap memory on backends without such memory, or when the driver refuses
    /// more). Fill them and pass them to [`ComputeClient::create`] or
    /// [`ComputeClient::write_bytes`]; dropping one returns it to the backend's pool. Contents
    /// are unspecified until written. Never ticks.
    pub fn reserve_staging(&self, sizes: &[usize]) -> Vec<HostBytes> {
        sizes.iter().map(|&len| self.take_staging(len)).collect()
    }

    fn new_handle(&self, size: u64, data: Option<HostBytes>) -> Handle {
        self.make_room();
        Handle::create(&self.shared.inbox, size, data, self.stream_id())
    }

    /// Copies `data` to the start of `dst`; from 1 MiB on through staging memory in chunks, like
    /// [`ComputeClient::create_from_slice`]. Never ticks.
    pub fn write(&self, dst: impl Into<Binding>, data: &[u8]) -> Result<()> {
        let dst = dst.into();
        // Checked before the copy, so a refused write costs no staging.
        self.check_write(&dst, data.len())?;
        if data.len() < STAGE_FROM {
            self.push_write(dst, HostBytes::from_vec(data.to_vec()));
        } else {
            self.write_in_chunks(dst, data)?;
        }
        Ok(())
    }

    /// Copies `data` (a `Vec<u8>`, or [`HostBytes`] from [`ComputeClient::reserve_staging`]) to
    /// the start of `dst`, without another host copy on the way. Never ticks.
    pub fn write_bytes(&self, dst: impl Into<Binding>, data: impl Into<HostBytes>) -> Result<()> {
        let dst = dst.into();
        let data = data.into();
        self.check_write(&dst, data.len())?;
        self.push_write(dst, data);
        Ok(())
    }

    /// Whether `len` bytes may be written to `dst`: its runtime, its range, its size.
    pub(super) fn check_write(&self, dst: &Binding, len: usize) -> Result<()> {
        let (start, end) = dst.validate(self.shared.id)?;
        if len as u64 > end - start {
            return Err(Error::Binding(BindingError::WriteTooLarge {
                handle: dst.handle(),
                len: len as u64,
                capacity: end - start,
            }));
        }
        Ok(())
    }

    fn push_write(&self, dst: Binding, data: HostBytes) {
        self.make_room();
        self.shared.inbox.push(Command::Op(Op::Write {
            dst,
            data,
            stream: self.stream_id(),
        }));
    }

    /// Reads `sources` back; the future completes once a tick has seen the bytes arrive. The
    /// bytes are the memory the device copied into (page-locked on CUDA), handed over without a
    /// host copy; dropping them returns that memory to the backend's pool. Enqueues without
    /// ticking; under `Driver::Manual`, polling the future ticks while its bytes are not there
    /// (see [`ReplyFuture`]), so `block_on(read_async(..))` completes; a frame loop that must
    /// not tick uses [`ComputeClient::read_ticket`].
    pub fn read_async(&self, sources: &[Binding]) -> ReplyFuture<Vec<HostBytes>> {
        match self.enqueue_read(sources) {
            Ok(receiver) => ReplyFuture::waiting(receiver, &self.shared),
            Err(error) => ReplyFuture::failed(error),
        }
    }

    /// Reads `sources` back into a [`ReadTicket`] that a frame checks without blocking or
    /// ticking; the tick that sees the bytes arrive completes it. Only enqueues: never ticks.
    pub fn read_ticket(&self, sources: &[Binding]) -> Result<ReadTicket> {
        Ok(ReadTicket::waiting(self.enqueue_read(sources)?))
    }

    /// Reads `sources` back, blocking until the bytes are there; like
    /// [`ComputeClient::read_async`], without a host copy ([`HostBytes::into_vec`] makes one).
    /// May tick: a blocking call.
    pub fn read(&self, sources: &[Binding]) -> Result<Vec<HostBytes>> {
        let receiver = self.enqueue_read(sources)?;
        self.wait(receiver)
    }

    /// Reads one binding back, blocking until the bytes are there; see [`ComputeClient::read`].
    /// May tick.
    pub fn read_one(&self, source: impl Into<Binding>) -> Result<HostBytes> {
        let mut bytes = self.read(&[source.into()])?;
        bytes.pop().ok_or(Error::Disconnected)
    }

    /// Reads one binding back as elements of `T`, blocking until the bytes are there. May tick.
    pub fn read_one_as<T: bytemuck::Pod>(&self, source: impl Into<Binding>) -> Result<Vec<T>> {
        decode(&self.read_one(source)?)
    }

    pub(super) fn enqueue_read(&self, sources: &[Binding]) -> Result<oneshot::Receiver<ReadReply>> {
        self.enqueue_read_into(sources, None)
    }

    /// Queues a read of `sources` whose bytes land in `staging` where the backend can put them
    /// there (see `Backend::read_for`), else in its own.
    pub(super) fn enqueue_read_into(
        &self,
        sources: &[Binding],
        staging: Option<Arc<dyn StagingAllocator>>,
    ) -> Result<oneshot::Receiver<ReadReply>> {
        self.enqueue_read_past(sources, staging, super::to_client::Past::Nothing)
    }

    /// [`ComputeClient::enqueue_read_into`], queued past a capture open here where `past` says
    /// so (the source part of a graph's transfer).
    pub(super) fn enqueue_read_past(
        &self,
        sources: &[Binding],
        staging: Option<Arc<dyn StagingAllocator>>,
        past: super::to_client::Past,
    ) -> Result<oneshot::Receiver<ReadReply>> {
        for source in sources {
            source.validate(self.shared.id)?;
        }
        let (reply, receiver) = oneshot::channel();
        self.make_room();
        let read = Command::Read {
            sources: sources.iter().copied().collect(),
            stream: self.stream_id(),
            reply,
            staging,
        };
        self.push_past(read, past);
        Ok(receiver)
    }
}

/// `bytes` as elements of `T`, or `LayoutError::ElementSize` when they are not a whole number of
/// them.
pub(crate) fn decode<T: bytemuck::Pod>(bytes: &[u8]) -> Result<Vec<T>> {
    let elem_size = std::mem::size_of::<T>();
    if elem_size == 0 || !bytes.len().is_multiple_of(elem_size) {
        return Err(Error::Layout(LayoutError::ElementSize {
            len: bytes.len() as u64,
            elem_size: elem_size as u64,
        }));
    }
    // The bytes are only aligned for u8: copy the elements out rather than cast in place.
    Ok(bytes
        .chunks_exact(elem_size)
        .map(bytemuck::pod_read_unaligned)
        .collect())
}

//! Host↔device transfers of the client: handles created empty or from bytes, writes, reads, and
//! the staging buffers (page-locked on CUDA) that let large transfers skip a host copy.

use super::ComputeClient;
use futures_channel::oneshot;
use gpuworld_systems::inbox::{Command, ReadReply};
use gpuworld_systems::{Backend, Binding, Error, Handle, HostBytes, Result};
use std::future::Future;

/// Host copies at least this large go straight into staging memory (page-locked on CUDA), saving
/// the backend a second copy; smaller ones are not worth taking the runtime lock for.
const STAGE_DIRECTLY_FROM: usize = 1 << 20;

impl<B: Backend> ComputeClient<B> {
    /// A new handle of `size` bytes whose contents are undefined until written.
    pub fn empty(&self, size: u64) -> Handle {
        self.new_handle(size, None)
    }

    /// A new handle holding `data` (a `Vec<u8>`, or [`HostBytes`] from
    /// [`ComputeClient::reserve_staging`], which page-locked backends copy from directly).
    pub fn create(&self, data: impl Into<HostBytes>) -> Handle {
        let data = data.into();
        self.new_handle(data.len() as u64, Some(data))
    }

    /// A new handle holding a copy of `data`.
    pub fn create_from_slice(&self, data: &[u8]) -> Handle {
        self.create(self.host_copy(data))
    }

    /// A new handle holding a copy of `data`, copied once into staging memory the device reads
    /// directly (page-locked on CUDA) instead of into a heap buffer that the backend stages again.
    pub fn create_from_slice_pinned(&self, data: &[u8]) -> Handle {
        self.create(self.staged_copy(data))
    }

    /// A copy of `data` for a transfer: in staging memory from [`STAGE_DIRECTLY_FROM`] bytes on,
    /// on the heap below.
    fn host_copy(&self, data: &[u8]) -> HostBytes {
        if data.len() >= STAGE_DIRECTLY_FROM {
            self.staged_copy(data)
        } else {
            HostBytes::from_vec(data.to_vec())
        }
    }

    /// A copy of `data` in staging memory, or on the heap where none is handed out.
    fn staged_copy(&self, data: &[u8]) -> HostBytes {
        match self.reserve_staging(&[data.len()]).pop() {
            Some(mut bytes) if bytes.len() == data.len() => {
                bytes.copy_from_slice(data);
                bytes
            }
            _ => HostBytes::from_vec(data.to_vec()),
        }
    }

    /// Host buffers of `sizes` bytes in the memory the device copies fastest (page-locked on
    /// CUDA; ordinary heap memory on backends without such memory, or when the driver refuses
    /// more). Fill them and pass them to [`ComputeClient::create`] or
    /// [`ComputeClient::write_bytes`]; dropping one returns it to the backend's pool. Contents
    /// are unspecified until written.
    pub fn reserve_staging(&self, sizes: &[usize]) -> Vec<HostBytes> {
        if sizes.is_empty() {
            return Vec::new();
        }
        self.with_runtime(|runtime| runtime.backend_mut().reserve_staging(sizes))
    }

    fn new_handle(&self, size: u64, data: Option<HostBytes>) -> Handle {
        let id = self.shared.inbox.next_handle_id();
        self.shared.inbox.push(Command::Create {
            handle: id,
            size,
            data,
            stream: self.stream_id(),
        });
        Handle::new(id, size, self.shared.inbox.clone())
    }

    /// Copies `data` to the start of `dst`.
    pub fn write(&self, dst: impl Into<Binding>, data: &[u8]) -> Result<()> {
        let dst = dst.into();
        // Checked before the copy, so a refused write costs no staging.
        self.check_write(&dst, data.len())?;
        self.push_write(dst, self.host_copy(data));
        Ok(())
    }

    /// Copies `data` (a `Vec<u8>`, or [`HostBytes`] from [`ComputeClient::reserve_staging`]) to
    /// the start of `dst`, without another host copy on the way.
    pub fn write_bytes(&self, dst: impl Into<Binding>, data: impl Into<HostBytes>) -> Result<()> {
        let dst = dst.into();
        let data = data.into();
        self.check_write(&dst, data.len())?;
        self.push_write(dst, data);
        Ok(())
    }

    /// Whether `len` bytes may be written to `dst`: its runtime, its range, its size.
    fn check_write(&self, dst: &Binding, len: usize) -> Result<()> {
        let (start, end) = dst.validate(self.shared.id)?;
        if len as u64 > end - start {
            return Err(Error::WriteTooLarge {
                handle: dst.handle,
                len: len as u64,
                capacity: end - start,
            });
        }
        Ok(())
    }

    fn push_write(&self, dst: Binding, data: HostBytes) {
        self.shared.inbox.push(Command::Write {
            dst,
            data,
            stream: self.stream_id(),
        });
    }

    /// Reads `sources` back; the future completes once a tick has seen the bytes arrive.
    pub fn read_async(
        &self,
        sources: &[Binding],
    ) -> impl Future<Output = Result<Vec<Vec<u8>>>> + Send + 'static {
        let bytes = self.read_bytes_async(sources);
        async move { Ok(bytes.await?.into_iter().map(HostBytes::into_vec).collect()) }
    }

    /// Reads `sources` back into the memory the backend copied them to (page-locked on CUDA,
    /// so no further host copy); the future completes once a tick has seen the bytes arrive.
    pub fn read_bytes_async(
        &self,
        sources: &[Binding],
    ) -> impl Future<Output = Result<Vec<HostBytes>>> + Send + 'static {
        let receiver = self.enqueue_read(sources);
        async move {
            match receiver {
                Ok(receiver) => receiver.await.unwrap_or(Err(Error::Disconnected)),
                Err(error) => Err(error),
            }
        }
    }

    /// Reads `sources` back, blocking until the bytes are there.
    pub fn read(&self, sources: &[Binding]) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .read_bytes(sources)?
            .into_iter()
            .map(HostBytes::into_vec)
            .collect())
    }

    /// Reads `sources` back into the memory the backend copied them to (page-locked on CUDA,
    /// so no further host copy), blocking until the bytes are there. Dropping the bytes returns
    /// that memory to the backend.
    pub fn read_bytes(&self, sources: &[Binding]) -> Result<Vec<HostBytes>> {
        let receiver = self.enqueue_read(sources)?;
        self.wait(receiver)
    }

    /// Reads one binding back, blocking until the bytes are there.
    pub fn read_one(&self, source: impl Into<Binding>) -> Result<Vec<u8>> {
        let mut bytes = self.read(&[source.into()])?;
        bytes.pop().ok_or(Error::Disconnected)
    }

    /// Reads one binding back as elements of `T`, blocking until the bytes are there.
    pub fn read_one_as<T: bytemuck::Pod>(&self, source: impl Into<Binding>) -> Result<Vec<T>> {
        let bytes = self.read_one(source)?;
        let elem_size = std::mem::size_of::<T>();
        if elem_size == 0 || bytes.len() % elem_size != 0 {
            return Err(Error::ElementSize {
                len: bytes.len() as u64,
                elem_size: elem_size as u64,
            });
        }
        // The bytes are only aligned for u8: copy the elements out rather than cast in place.
        Ok(bytes
            .chunks_exact(elem_size)
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }

    fn enqueue_read(&self, sources: &[Binding]) -> Result<oneshot::Receiver<ReadReply>> {
        for source in sources {
            source.validate(self.shared.id)?;
        }
        let (reply, receiver) = oneshot::channel();
        self.shared.inbox.push(Command::Read {
            sources: sources.iter().copied().collect(),
            stream: self.stream_id(),
            reply,
        });
        Ok(receiver)
    }
}

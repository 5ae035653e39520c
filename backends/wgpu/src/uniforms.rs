//! The scalars of launches: each launch's words go at its own aligned offset of a uniform chunk
//! owned by the stream's pending batch, bound with a dynamic offset. The chunk's bytes are
//! written with `queue.write_buffer` right before the batch is submitted (such writes land at
//! the start of the next submission, which is this one), and the chunk is reused once that
//! submission has completed.

/// Bytes of one uniform chunk.
const CHUNK_SIZE: u64 = 256 * 1024;

/// A uniform buffer being filled by one stream's batch.
pub(crate) struct UniformChunk {
    /// Stable number, part of bind group cache keys.
    pub id: u64,
    /// The buffer.
    pub buffer: wgpu::Buffer,
    bytes: Vec<u8>,
}

/// Uniform chunks: free, and retired with the submission that uses them.
pub(crate) struct UniformPool {
    alignment: u64,
    free: Vec<UniformChunk>,
    in_flight: Vec<(u64, UniformChunk)>,
    next_id: u64,
}

impl UniformPool {
    /// An empty pool whose offsets are multiples of `alignment`.
    pub fn new(alignment: u64) -> UniformPool {
        UniformPool {
            alignment: alignment.max(16),
            free: Vec::new(),
            in_flight: Vec::new(),
            next_id: 0,
        }
    }

    /// Appends `scalars` (padded to `size` bytes) to the batch's chunks; returns the chunk's
    /// index in `batch` and the dynamic offset.
    pub fn push(
        &mut self,
        device: &wgpu::Device,
        batch: &mut Vec<UniformChunk>,
        scalars: &[u32],
        size: u64,
    ) -> (usize, u32) {
        let fits = |chunk: &UniformChunk| {
            (chunk.bytes.len() as u64).next_multiple_of(self.alignment) + size <= CHUNK_SIZE
        };
        if !batch.last().is_some_and(fits) {
            let chunk = self.free.pop().unwrap_or_else(|| {
                self.next_id += 1;
                UniformChunk {
                    id: self.next_id,
                    buffer: device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("gpuworld scalars"),
                        size: CHUNK_SIZE,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    }),
                    bytes: Vec::with_capacity(4096),
                }
            });
            batch.push(chunk);
        }
        let index = batch.len() - 1;
        let chunk = &mut batch[index];
        let offset = (chunk.bytes.len() as u64).next_multiple_of(self.alignment);
        chunk.bytes.resize(offset as usize, 0);
        chunk
            .bytes
            .extend(scalars.iter().flat_map(|word| word.to_le_bytes()));
        chunk.bytes.resize((offset + size) as usize, 0);
        (index, offset as u32)
    }

    /// Writes the batch's chunks; call right before submitting the batch.
    pub fn upload(queue: &wgpu::Queue, batch: &[UniformChunk]) -> u64 {
        let mut uploaded = 0;
        for chunk in batch {
            if !chunk.bytes.is_empty() {
                queue.write_buffer(&chunk.buffer, 0, &chunk.bytes);
                uploaded += chunk.bytes.len() as u64;
            }
        }
        uploaded
    }

    /// Holds the batch's chunks until submission `seq` completes.
    pub fn retire(&mut self, batch: &mut Vec<UniformChunk>, seq: u64) {
        for mut chunk in batch.drain(..) {
            chunk.bytes.clear();
            self.in_flight.push((seq, chunk));
        }
    }

    /// Frees the chunks whose submission completed.
    pub fn recycle(&mut self, completed: u64) {
        let (done, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|(seq, _)| *seq <= completed);
        self.in_flight = pending;
        self.free.extend(done.into_iter().map(|(_, chunk)| chunk));
    }
}

//! Host-to-device writes that keep stream order (cubecl #1120). `queue.write_buffer` lands at
//! the start of the next submission, before commands already recorded in a pending encoder, so
//! a write after a queued launch would overtake it. Instead the bytes are copied into a mapped
//! staging chunk and a `copy_buffer_to_buffer` is recorded in the stream's encoder, in order.
//! Chunks are unmapped at submission and mapped again once it completed; the total staging held
//! is bounded by a budget, beyond which the caller submits the stream first and then uses the
//! queue (which is ordered once nothing of the stream is pending).

use parking_lot::Mutex;
use std::sync::Arc;

/// Offsets in a chunk are multiples of wgpu's map alignment.
const MAP_ALIGNMENT: u64 = wgpu::MAP_ALIGNMENT;

/// One staging buffer, mapped for writing while it is being filled.
pub(crate) struct UploadChunk {
    buffer: wgpu::Buffer,
    size: u64,
    used: u64,
}

enum MapState {
    Pending,
    Mapped,
    Failed,
}

/// Staging chunks: free (mapped), in a pending batch, in flight, or being mapped again.
pub(crate) struct UploadBelt {
    chunk_size: u64,
    budget: u64,
    held: u64,
    free: Vec<UploadChunk>,
    in_flight: Vec<(u64, UploadChunk)>,
    mapping: Vec<(Arc<Mutex<MapState>>, UploadChunk)>,
}

impl UploadBelt {
    /// A belt of `chunk_size` chunks holding at most `budget` bytes.
    pub fn new(chunk_size: u64, budget: u64) -> UploadBelt {
        UploadBelt {
            chunk_size: chunk_size
                .max(MAP_ALIGNMENT)
                .next_multiple_of(MAP_ALIGNMENT),
            budget,
            held: 0,
            free: Vec::new(),
            in_flight: Vec::new(),
            mapping: Vec::new(),
        }
    }

    /// Bytes of staging held, whatever their state.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Copies `data` (a multiple of 4 bytes) into staging owned by `batch`; returns the staging
    /// buffer and offset to copy from, or `None` when the budget is spent.
    pub fn stage(
        &mut self,
        device: &wgpu::Device,
        batch: &mut Vec<UploadChunk>,
        data: &[u8],
    ) -> Option<(wgpu::Buffer, u64)> {
        let len = data.len() as u64;
        let room = |chunk: &UploadChunk| chunk.size - chunk.used >= len;
        if !batch.last().is_some_and(room) {
            let chunk = match self.free.iter().position(room) {
                Some(i) => self.free.swap_remove(i),
                None => {
                    let size = len.next_multiple_of(MAP_ALIGNMENT).max(self.chunk_size);
                    if self.held + size > self.budget {
                        return None;
                    }
                    self.held += size;
                    UploadChunk {
                        buffer: device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some("gpuworld upload staging"),
                            size,
                            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                            mapped_at_creation: true,
                        }),
                        size,
                        used: 0,
                    }
                }
            };
            batch.push(chunk);
        }
        let chunk = batch.last_mut()?;
        let offset = chunk.used;
        let mut view = chunk
            .buffer
            .slice(offset..offset + len)
            .get_mapped_range_mut()
            .ok()?;
        view.copy_from_slice(data);
        drop(view);
        chunk.used = (offset + len).next_multiple_of(MAP_ALIGNMENT);
        Some((chunk.buffer.clone(), offset))
    }

    /// Unmaps the batch's chunks; call right before submitting the batch.
    pub fn unmap(batch: &[UploadChunk]) {
        for chunk in batch {
            chunk.buffer.unmap();
        }
    }

    /// Holds the batch's chunks until submission `seq` completes.
    pub fn retire(&mut self, batch: &mut Vec<UploadChunk>, seq: u64) {
        self.in_flight
            .extend(batch.drain(..).map(|chunk| (seq, chunk)));
    }

    /// Maps again the chunks whose submission completed and frees those mapped; oversized
    /// chunks are dropped rather than kept.
    pub fn recycle(&mut self, completed: u64) {
        let mut index = 0;
        while index < self.in_flight.len() {
            if self.in_flight[index].0 > completed {
                index += 1;
                continue;
            }
            let (_, mut chunk) = self.in_flight.swap_remove(index);
            if chunk.size > self.chunk_size {
                self.held -= chunk.size;
                continue;
            }
            chunk.used = 0;
            let state = Arc::new(Mutex::new(MapState::Pending));
            let callback_state = state.clone();
            chunk
                .buffer
                .map_async(wgpu::MapMode::Write, .., move |result| {
                    *callback_state.lock() = match result {
                        Ok(()) => MapState::Mapped,
                        Err(_) => MapState::Failed,
                    };
                });
            self.mapping.push((state, chunk));
        }
        let mut index = 0;
        while index < self.mapping.len() {
            let state = std::mem::replace(&mut *self.mapping[index].0.lock(), MapState::Pending);
            match state {
                MapState::Pending => index += 1,
                MapState::Mapped => {
                    let (_, chunk) = self.mapping.swap_remove(index);
                    self.free.push(chunk);
                }
                MapState::Failed => {
                    let (_, chunk) = self.mapping.swap_remove(index);
                    self.held -= chunk.size;
                }
            }
        }
    }
}

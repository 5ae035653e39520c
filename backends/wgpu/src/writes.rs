//! Host-to-device writes in stream order: whole words are staged through the upload belt and
//! copied by the stream's encoder (see `uploads`); a partial word at either end of a write is
//! merged into the buffer on the device, since copies move whole words.

use crate::device::WgpuBackend;
use crate::wgsl::WgslSource;
use gpuworld_hal::backend::{LaunchCount, Region, StorageId};
use gpuworld_hal::kernel::{KernelDef, Param, Signature};

/// Merges the bytes `mask` selects of `value` into one word: how a write that does not cover
/// whole words reaches the device (copies move whole words). Internal to the backend.
static PATCH_WORD: KernelDef = KernelDef {
    id: "gpuworld.wgpu.patch_word",
    name: "patch_word",
    signature: Signature {
        buffers: &[Param::u32("words")],
        scalars: &[Param::u32("word"), Param::u32("mask"), Param::u32("value")],
        cube_dim: [1, 1, 1],
    },
    sources: &[&WgslSource(
        "@compute @workgroup_size(1, 1, 1)
fn main() {
    if scalars.word < arrayLength(&words) {
        let old = words[scalars.word];
        words[scalars.word] = (old & ~scalars.mask) | (scalars.value & scalars.mask);
    }
}
",
    )],
};

impl WgpuBackend {
    /// Copies `data` (whole words) to `offset` of `buffer` in stream order.
    fn record_words(&mut self, s: usize, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        let stream = &mut self.streams[s];
        match self.uploads.stage(&self.device, &mut stream.uploads, data) {
            Some((staging, from)) => {
                stream.encoder(&self.device).copy_buffer_to_buffer(
                    &staging,
                    from,
                    buffer,
                    offset,
                    data.len() as u64,
                );
                stream.commands += 1;
            }
            None => {
                // The staging budget is spent: once nothing of this stream is pending, the
                // queue's own write lands in order. The empty batch left behind makes the next
                // flush submit, so its event covers the write.
                self.submit(s);
                self.queue.write_buffer(buffer, offset, data);
                self.streams[s].encoder(&self.device);
            }
        }
    }

    /// Records a write of `data` at the start of `dst`.
    pub(crate) fn record_write(
        &mut self,
        s: usize,
        dst: Region,
        data: &[u8],
    ) -> Result<(), String> {
        let buffer = self
            .buffer(dst.storage)
            .ok_or("write to freed memory")?
            .clone();
        let len = (data.len() as u64).min(dst.size);
        if len == 0 {
            return Ok(());
        }
        let (start, end) = (dst.offset, dst.offset + len);
        if end > buffer.size() {
            return Err(format!(
                "write of bytes {start}..{end} past the end of a {}-byte buffer",
                buffer.size()
            ));
        }
        let (body_start, body_end) = (start.next_multiple_of(4), end / 4 * 4);
        if body_end > body_start {
            let body = &data[(body_start - start) as usize..(body_end - start) as usize];
            self.record_words(s, &buffer, body_start, body);
        }
        // Copies move whole words: a partial word at either end is merged on the device.
        let (first, last) = (start / 4, (end - 1) / 4);
        let words = if first == last {
            vec![first]
        } else {
            vec![first, last]
        };
        for word in words {
            let at = word * 4;
            if at >= start && at + 4 <= end {
                continue;
            }
            let (mut mask, mut value) = (0u32, 0u32);
            for byte in 0..4 {
                let position = at + byte;
                if position >= start && position < end {
                    mask |= 0xff << (8 * byte);
                    value |= u32::from(data[(position - start) as usize]) << (8 * byte);
                }
            }
            self.record_word_patch(s, dst.storage, &buffer, at, mask, value)?;
        }
        Ok(())
    }

    /// Records the merge of the bytes `mask` selects of `value` into the word at byte `at` of
    /// `buffer`, in stream order.
    pub(crate) fn record_word_patch(
        &mut self,
        s: usize,
        storage: StorageId,
        buffer: &wgpu::Buffer,
        at: u64,
        mask: u32,
        value: u32,
    ) -> Result<(), String> {
        let alignment = u64::from(self.limits.min_storage_buffer_offset_alignment).max(4);
        let offset = at / alignment * alignment;
        let region = Region {
            storage,
            offset,
            size: alignment.min(buffer.size() - offset),
        };
        let word = ((at - offset) / 4) as u32;
        self.record_launch(
            s,
            &PATCH_WORD,
            LaunchCount::Static([1, 1, 1]),
            &[region],
            &[word, mask, value],
        )
        .map_err(|error| error.to_string())
    }
}

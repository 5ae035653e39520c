//! Device-to-device copies in stream order. Between two buffers, a copy command in the stream's
//! encoder. Within one buffer, which wgpu's copy command refuses, a dispatch of `COPY_WORDS` in
//! the stream's compute pass: both ranges bound as writable storage of the one buffer (wgpu
//! refuses a buffer as read-only and writable storage in one dispatch), each binding starting at
//! the storage offset alignment at or before its range, the words to skip passed as scalars, in
//! chunks that fit `max_storage_buffer_binding_size`. Copies move whole words, so offsets and
//! size must be multiples of 4.

use crate::device::WgpuBackend;
use crate::wgsl::WgslSource;
use gpuworld_hal::backend::{LaunchCount, Region};
use gpuworld_hal::kernel::{KernelDef, Param, Signature};

/// Invocations per workgroup of [`COPY_WORDS`].
const WORKGROUP: u32 = 64;

/// Copies `count` words from word `src_skip` of `src` to word `dst_skip` of `dst`, each
/// invocation striding over the words, so that a copy needs at most one workgroup per word of
/// 64 and as few as the device's limit per axis allows. Internal to the backend.
static COPY_WORDS: KernelDef = KernelDef {
    id: "gpuworld.wgpu.copy_words",
    name: "copy_words",
    signature: Signature {
        buffers: &[Param::u32("src"), Param::u32("dst")],
        scalars: &[
            Param::u32("src_skip"),
            Param::u32("dst_skip"),
            Param::u32("count"),
        ],
        cube_dim: [WORKGROUP, 1, 1],
    },
    sources: &[&WgslSource(
        "@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(global_invocation_id) id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let stride = groups.x * 64u;
    for (var i = id.x; i < scalars.count; i += stride) {
        dst[scalars.dst_skip + i] = src[scalars.src_skip + i];
    }
}
",
    )],
};

impl WgpuBackend {
    /// Records a copy of `src` into `dst` on stream `s`; the reason it cannot, which records
    /// nothing.
    pub(crate) fn record_copy(&mut self, s: usize, src: Region, dst: Region) -> Result<(), String> {
        if let Some(refusal) = src.copy_refusal(&dst) {
            return Err(refusal.to_string());
        }
        let size = src.size;
        if size == 0 {
            return Ok(());
        }
        if !(src.offset.is_multiple_of(4) && dst.offset.is_multiple_of(4) && size.is_multiple_of(4))
        {
            return Err(format!(
                "copy of {size} bytes from offset {} to offset {}: wgpu copies whole words, so \
                 offsets and size must be multiples of 4",
                src.offset, dst.offset
            ));
        }
        let (Some(from), Some(to)) = (self.buffer(src.storage), self.buffer(dst.storage)) else {
            return Err("copy of freed memory".to_string());
        };
        for (region, buffer) in [(src, from), (dst, to)] {
            if region.offset.saturating_add(size) > buffer.size() {
                return Err(format!(
                    "copy of bytes {}..{} past the end of a {}-byte buffer",
                    region.offset,
                    region.offset + size,
                    buffer.size()
                ));
            }
        }
        if src.storage == dst.storage {
            return self.record_copy_within(s, src, dst);
        }
        let (from, to) = (from.clone(), to.clone());
        let stream = &mut self.streams[s];
        stream
            .encoder(&self.device)
            .copy_buffer_to_buffer(&from, src.offset, &to, dst.offset, size);
        stream.commands += 1;
        Ok(())
    }

    /// Records a copy between two ranges of one buffer (checked: whole words, inside the
    /// buffer, sharing no byte) as dispatches of [`COPY_WORDS`].
    fn record_copy_within(&mut self, s: usize, src: Region, dst: Region) -> Result<(), String> {
        let alignment = u64::from(self.limits.min_storage_buffer_offset_alignment).max(4);
        let max_binding = self.limits.max_storage_buffer_binding_size / 4 * 4;
        // A binding starts up to `alignment - 4` bytes before its range; word indices stay
        // well inside `u32`.
        let chunk = max_binding.saturating_sub(alignment).min(1 << 31);
        if chunk == 0 {
            return Err(format!(
                "copy within a buffer: max_storage_buffer_binding_size of {max_binding} bytes \
                 leaves no room past the {alignment}-byte offset alignment"
            ));
        }
        let per_axis = self.limits.max_compute_workgroups_per_dimension.max(1);
        let bound = |offset: u64, len: u64| {
            let start = offset / alignment * alignment;
            let binding = Region {
                storage: src.storage,
                offset: start,
                size: offset - start + len,
            };
            (binding, ((offset - start) / 4) as u32)
        };
        let mut done = 0;
        while done < src.size {
            let len = (src.size - done).min(chunk);
            let (from, src_skip) = bound(src.offset + done, len);
            let (to, dst_skip) = bound(dst.offset + done, len);
            let words = (len / 4) as u32;
            let groups = words.div_ceil(WORKGROUP).min(per_axis);
            self.record_launch(
                s,
                &COPY_WORDS,
                LaunchCount::Static([groups, 1, 1]),
                &[from, to],
                &[src_skip, dst_skip, words],
            )
            .map_err(|error| error.to_string())?;
            done += len;
        }
        Ok(())
    }
}

//! Host memory for the cpu and sim backends: 64-byte aligned buffers behind generational keys,
//! with an optional capacity so that out-of-memory can be provoked on purpose.
//!
//! Every access is an atomic on a 4-byte word: copies here, kernels through [`KernelIo`]. Work
//! the runtime failed to order (a copy and a kernel on the same bytes at once) then gives wrong
//! values, never undefined behaviour. A large copy runs in word-aligned pieces on rayon's pool:
//! one thread of word-sized atomics moves bytes well below memory bandwidth. A kernel's
//! [`CpuBuffer`](crate::kernel::CpuBuffer) borrows this memory, so a buffer cannot be freed while a view of it is alive;
//! the cpu backend holds its `RwLock`'s read guard for a whole launch and takes the write lock
//! to free.
//!
//! On unix it also maps pages, as CUDA does (`pages.rs`): addresses reserved with no memory under
//! them ([`HostMemory::reserve_addresses`]), host pages mapped under them and unmapped again, so
//! that the memory pool's mapped pool holds what is live within a page per hole. A region of
//! reserved addresses is live memory only where every byte of it is mapped.
//!
//! [`KernelIo`]: crate::kernel::KernelIo
//! [`HostMemory::reserve_addresses`]: crate::host_memory::HostMemory::reserve_addresses

mod pages;

use crate::backend::{AllocError, Region, StorageId};
use crate::kernel::CpuBuffer;
use crate::staging::COPY_PIECE;
use pages::{PagesError, Reservation};
use rayon::prelude::*;
use slotmap::{Key, KeyData, SlotMap, new_key_type};
use std::sync::atomic::{AtomicU32, Ordering};

new_key_type! { struct BufferKey; }

/// Words per 64-byte block.
const BLOCK_WORDS: usize = 16;

/// One cache line of words, so that every buffer starts 64-byte aligned.
#[repr(C, align(64))]
struct Block([AtomicU32; BLOCK_WORDS]);

struct HostBuffer {
    blocks: Box<[Block]>,
    size: u64,
}

impl HostBuffer {
    fn new(size: u64) -> Option<HostBuffer> {
        let blocks = usize::try_from(size.div_ceil(64).max(1)).ok()?;
        let mut storage: Vec<Block> = Vec::new();
        storage.try_reserve_exact(blocks).ok()?;
        storage.resize_with(blocks, || Block(Default::default()));
        Some(HostBuffer {
            blocks: storage.into_boxed_slice(),
            size,
        })
    }

    /// The whole buffer as one slice of words.
    fn words(&self) -> &[AtomicU32] {
        let len = self.blocks.len() * BLOCK_WORDS;
        // SAFETY: `Block` is `repr(C)` over `[AtomicU32; 16]`, 64 bytes with no padding, so the
        // boxed blocks are `len` initialised, contiguous, 4-aligned words, borrowed as long as
        // `self`; atomics may be shared.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<AtomicU32>(), len) }
    }
}

/// What a [`StorageId`] names: a buffer, or reserved addresses with pages mapped under them.
enum Storage {
    Buffer(HostBuffer),
    Reserved(Reservation),
}

/// Host buffers and reserved addresses, addressed by [`StorageId`].
#[derive(Default)]
pub struct HostMemory {
    buffers: SlotMap<BufferKey, Storage>,
    capacity: Option<u64>,
    allocated: u64,
    /// Reservations with pages unmapped since the last trim (maybe repeated, maybe gone).
    untrimmed: Vec<BufferKey>,
}

impl std::fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemory")
            .field("storages", &self.buffers.len())
            .field("allocated", &self.allocated)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl HostMemory {
    /// Bytes of the largest buffer: a `Vec` holds at most `isize::MAX` bytes.
    pub const MAX_BUFFER_BYTES: u64 = (isize::MAX as u64) / 64 * 64;

    /// The properties of a device whose memory is this host's (the cpu and sim backends): the
    /// host's launch limits, sliced layout, no page mapping; `name`, `memory_bytes` and
    /// `alignment` are the backend's.
    pub fn device_properties(
        name: String,
        memory_bytes: u64,
        alignment: u64,
    ) -> crate::backend::DeviceProperties {
        use crate::kernel::limits;
        crate::backend::DeviceProperties {
            name,
            memory_bytes,
            alignment,
            max_cube_count: limits::HOST_MAX_CUBE_COUNT,
            max_cube_dim: limits::HOST_MAX_CUBE_DIM,
            max_units_per_cube: limits::HOST_MAX_UNITS_PER_CUBE,
            max_buffer_bytes: Some(HostMemory::MAX_BUFFER_BYTES),
            page_mapping: None,
            split_mappings: false,
            slow_buffers: false,
            memory_layout: crate::backend::MemoryLayout::Sliced,
            limits: Default::default(),
            features: Vec::new(),
        }
    }

    /// Host memory that refuses allocations beyond `capacity` bytes, when given.
    pub fn new(capacity: Option<u64>) -> HostMemory {
        HostMemory {
            buffers: SlotMap::with_key(),
            capacity,
            allocated: 0,
            untrimmed: Vec::new(),
        }
    }

    /// Bytes of a page where this memory maps pages ([`HostMemory::reserve_addresses`]): the
    /// host's page size on unix (not under Miri), else `None`.
    pub fn page_mapping() -> Option<u64> {
        pages::page_size()
    }

    /// Bytes currently allocated: buffers and mapped pages.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The capacity, if capped.
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Allocates a zeroed buffer of `size` bytes: `BufferTooLarge` above
    /// [`HostMemory::MAX_BUFFER_BYTES`], `OutOfMemory` beyond the capacity or when the host
    /// refuses.
    pub fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        if size > Self::MAX_BUFFER_BYTES {
            return Err(AllocError::BufferTooLarge {
                limit: Self::MAX_BUFFER_BYTES,
            });
        }
        if let Some(cap) = self.capacity
            && self.allocated.saturating_add(size) > cap
        {
            return Err(AllocError::OutOfMemory);
        }
        let buffer = HostBuffer::new(size).ok_or(AllocError::OutOfMemory)?;
        self.allocated += size;
        let key = self.buffers.insert(Storage::Buffer(buffer));
        Ok(StorageId(key.data().as_ffi()))
    }

    /// Frees a buffer; an unknown id, or reserved addresses, are ignored. Needs `&mut self`, so
    /// no view is alive.
    pub fn deallocate(&mut self, storage: StorageId) {
        if let Some(Storage::Buffer(buffer)) = self.buffers.get(key(storage)) {
            self.allocated -= buffer.size;
            self.buffers.remove(key(storage));
        }
    }

    /// Reserves `size` bytes of addresses (whole pages of [`HostMemory::page_mapping`]) with no
    /// memory under them, for [`HostMemory::map_pages`]: `DeviceFailed` where this memory
    /// cannot map pages, `OutOfMemory` when the host refuses the addresses.
    pub fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError> {
        if Self::page_mapping().is_none() {
            return Err(AllocError::DeviceFailed {
                reason: "host memory maps pages only on unix".into(),
            });
        }
        let reservation = Reservation::new(size).ok_or(AllocError::OutOfMemory)?;
        let key = self.buffers.insert(Storage::Reserved(reservation));
        Ok(StorageId(key.data().as_ffi()))
    }

    /// The reservation `storage` names, to change.
    fn reservation(&mut self, storage: StorageId) -> Result<&mut Reservation, AllocError> {
        match self.buffers.get_mut(key(storage)) {
            Some(Storage::Reserved(reservation)) => Ok(reservation),
            _ => Err(AllocError::DeviceFailed {
                reason: "not reserved addresses of this memory".into(),
            }),
        }
    }

    /// Maps host memory under the `len` bytes of whole pages at `offset` of reserved addresses,
    /// none of them mapped: zeroed where fresh, while pages unmapped since the last
    /// [`HostMemory::trim_pages`] keep their bytes. `OutOfMemory` beyond the capacity or when the
    /// host refuses; `DeviceFailed` for pages that are not whole, outside the reservation or
    /// mapped already. A refused call maps nothing.
    pub fn map_pages(
        &mut self,
        storage: StorageId,
        offset: u64,
        len: u64,
    ) -> Result<(), AllocError> {
        let over_capacity = self
            .capacity
            .is_some_and(|cap| self.allocated.saturating_add(len) > cap);
        let reservation = self.reservation(storage)?;
        if over_capacity {
            return Err(AllocError::OutOfMemory);
        }
        reservation.map(offset, len).map_err(pages_error)?;
        self.allocated += len;
        Ok(())
    }

    /// Unmaps the `len` bytes of mapped pages at `offset` of reserved addresses: from now on
    /// no region over them is live memory, and the next [`HostMemory::trim_pages`] returns their
    /// memory to the host (unless mapped again before). Pages not mapped are refused with
    /// `DeviceFailed`. Needs `&mut self`, so no view is alive.
    pub fn unmap_pages(
        &mut self,
        storage: StorageId,
        offset: u64,
        len: u64,
    ) -> Result<(), AllocError> {
        self.reservation(storage)?
            .unmap(offset, len)
            .map_err(pages_error)?;
        self.allocated -= len;
        if self.untrimmed.last() != Some(&key(storage)) {
            self.untrimmed.push(key(storage));
        }
        Ok(())
    }

    /// Returns the memory of the pages unmapped since the last call and not mapped again, a
    /// system call per run of neighbouring pages.
    pub fn trim_pages(&mut self) {
        for reserved in std::mem::take(&mut self.untrimmed) {
            if let Some(Storage::Reserved(reservation)) = self.buffers.get_mut(reserved) {
                reservation.trim();
            }
        }
    }

    /// Returns reserved addresses and every page under them; an unknown id, or a buffer, are
    /// ignored.
    pub fn free_addresses(&mut self, storage: StorageId) {
        if let Some(Storage::Reserved(reservation)) = self.buffers.get(key(storage)) {
            self.allocated -= reservation.mapped_bytes();
            self.buffers.remove(key(storage));
        }
    }

    /// The words holding `region` in live memory (from the word of its first byte, through its
    /// last; for a buffer, through the buffer's end), with the region's first byte in them and
    /// its size: `None` unless the region lies in a live buffer or in mapped pages.
    fn checked_range(&self, region: Region) -> Option<(&[AtomicU32], usize, usize)> {
        let size = usize::try_from(region.size).ok()?;
        let words = match self.buffers.get(key(region.storage))? {
            Storage::Buffer(buffer) => {
                let end = region.offset.checked_add(region.size)?;
                if end > buffer.size {
                    return None;
                }
                buffer
                    .words()
                    .get(usize::try_from(region.offset / 4).ok()?..)?
            }
            Storage::Reserved(reservation) => reservation.words(region.offset, region.size)?,
        };
        Some((words, (region.offset % 4) as usize, size))
    }

    /// Copies `data` to the start of `region`; false if the region is not live memory.
    pub fn write(&self, region: Region, data: &[u8]) -> bool {
        let Some((words, offset, size)) = self.checked_range(region) else {
            return false;
        };
        store_bytes(words, offset, &data[..data.len().min(size)]);
        true
    }

    /// Copies `region` out; `None` if the region is not live memory.
    pub fn read(&self, region: Region) -> Option<Vec<u8>> {
        let mut out = vec![0u8; usize::try_from(region.size).ok()?];
        self.read_into(region, &mut out).then_some(out)
    }

    /// Copies the start of `region` into `out` (as many bytes as the shorter holds); false if
    /// the region is not live memory.
    pub fn read_into(&self, region: Region, out: &mut [u8]) -> bool {
        let Some((words, offset, size)) = self.checked_range(region) else {
            return false;
        };
        let len = out.len().min(size);
        load_bytes(words, offset, &mut out[..len]);
        true
    }

    /// Copies `src` into `dst` (the same size; the ranges may share a buffer, not bytes), whole
    /// words at a time where both start on a word and the size is whole words, and in pieces on
    /// rayon's pool when large; false if either region is not live memory or the sizes differ.
    pub fn copy(&self, src: Region, dst: Region) -> bool {
        let (Some((from, src_start, size)), Some((to, dst_start, dst_size))) =
            (self.checked_range(src), self.checked_range(dst))
        else {
            return false;
        };
        if size != dst_size {
            return false;
        }
        if src_start % 4 == 0 && dst_start % 4 == 0 && size % 4 == 0 {
            let from = from.get(src_start / 4..(src_start + size) / 4);
            let to = to.get(dst_start / 4..(dst_start + size) / 4);
            let (Some(from), Some(to)) = (from, to) else {
                return false;
            };
            copy_words(from, to);
        } else {
            // Through host bytes, a piece at a time: the ranges share no byte, so no piece reads
            // what an earlier piece wrote.
            let mut buffer = vec![0u8; size.min(COPY_PIECE)];
            for done in (0..size).step_by(COPY_PIECE) {
                let piece = &mut buffer[..(size - done).min(COPY_PIECE)];
                load_bytes(from, src_start + done, piece);
                store_bytes(to, dst_start + done, piece);
            }
        }
        true
    }

    /// A kernel's view of the whole words of `region`, alive as long as the borrow of this
    /// memory; `None` if the region is not live memory or not 4-byte aligned.
    ///
    /// A view cannot outlive the buffer it sees:
    /// ```compile_fail,E0502
    /// # use gpuworld_hal::{backend::Region, host_memory::HostMemory};
    /// let mut memory = HostMemory::new(None);
    /// let storage = memory.allocate(64).unwrap();
    /// let view = memory.view(Region { storage, offset: 0, size: 64 }).unwrap();
    /// memory.deallocate(storage);
    /// assert_eq!(view.len(), 64);
    /// ```
    /// nor the memory itself:
    /// ```compile_fail,E0597
    /// # use gpuworld_hal::{backend::Region, host_memory::HostMemory};
    /// let view = {
    ///     let mut memory = HostMemory::new(None);
    ///     let storage = memory.allocate(64).unwrap();
    ///     memory.view(Region { storage, offset: 0, size: 64 }).unwrap()
    /// };
    /// assert_eq!(view.len(), 64);
    /// ```
    pub fn view(&self, region: Region) -> Option<CpuBuffer<'_>> {
        let (words, start, size) = self.checked_range(region)?;
        if start != 0 {
            return None;
        }
        Some(CpuBuffer::new(words.get(..size / 4)?))
    }
}

/// A reservation's refusal as the backend interface words it.
fn pages_error(error: PagesError) -> AllocError {
    match error {
        PagesError::OutOfMemory => AllocError::OutOfMemory,
        PagesError::Misuse(what) => AllocError::DeviceFailed {
            reason: what.into(),
        },
    }
}

/// Stores `bytes` at byte `start` of `words`, in pieces on rayon's pool when large (see
/// [`in_pieces`]).
fn store_bytes(words: &[AtomicU32], start: usize, bytes: &[u8]) {
    let Some((first, rest)) = in_pieces(start, bytes.len()) else {
        store_piece(words, start, bytes);
        return;
    };
    let (head, rest_bytes) = bytes.split_at(first);
    rayon::join(
        || store_piece(words, start, head),
        || {
            rest_bytes
                .par_chunks(COPY_PIECE)
                .enumerate()
                .for_each(|(i, piece)| store_piece(words, rest + i * COPY_PIECE, piece));
        },
    );
}

/// Stores `bytes` at byte `start` of `words` on this thread: whole words with one store each, a
/// partial first or last word merged with a compare-exchange, so that bytes next to the range
/// that another stream (or another piece of this copy) writes meanwhile are kept.
fn store_piece(words: &[AtomicU32], start: usize, bytes: &[u8]) {
    let head_len = ((4 - start % 4) % 4).min(bytes.len());
    let (head, rest) = bytes.split_at(head_len);
    if !head.is_empty() {
        merge_into(&words[start / 4], start % 4, head);
    }
    let first = (start + head_len) / 4;
    let (whole, tail) = rest.as_chunks::<4>();
    for (word, chunk) in words[first..].iter().zip(whole) {
        word.store(u32::from_ne_bytes(*chunk), Ordering::Relaxed);
    }
    if !tail.is_empty() {
        merge_into(&words[first + whole.len()], 0, tail);
    }
}

/// Replaces the bytes of `word` from byte `at` with `bytes`, keeping the others.
fn merge_into(word: &AtomicU32, at: usize, bytes: &[u8]) {
    let merge = |old: u32| {
        let mut merged = old.to_ne_bytes();
        merged[at..at + bytes.len()].copy_from_slice(bytes);
        Some(u32::from_ne_bytes(merged))
    };
    // The closure always returns `Some`, so the update always succeeds.
    let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, merge);
}

/// Loads `out.len()` bytes from byte `start` of `words`, in pieces on rayon's pool when large
/// (see [`in_pieces`]).
fn load_bytes(words: &[AtomicU32], start: usize, out: &mut [u8]) {
    let Some((first, rest)) = in_pieces(start, out.len()) else {
        load_piece(words, start, out);
        return;
    };
    let (head, rest_out) = out.split_at_mut(first);
    rayon::join(
        || load_piece(words, start, head),
        || {
            rest_out
                .par_chunks_mut(COPY_PIECE)
                .enumerate()
                .for_each(|(i, piece)| load_piece(words, rest + i * COPY_PIECE, piece));
        },
    );
}

/// Loads `out.len()` bytes from byte `start` of `words` on this thread.
fn load_piece(words: &[AtomicU32], start: usize, out: &mut [u8]) {
    let head_len = ((4 - start % 4) % 4).min(out.len());
    let (head, rest) = out.split_at_mut(head_len);
    if !head.is_empty() {
        let at = start % 4;
        let word = words[start / 4].load(Ordering::Relaxed).to_ne_bytes();
        head.copy_from_slice(&word[at..at + head_len]);
    }
    let first = (start + head_len) / 4;
    let (whole, tail) = rest.as_chunks_mut::<4>();
    let whole_len = whole.len();
    for (word, chunk) in words[first..].iter().zip(whole) {
        *chunk = word.load(Ordering::Relaxed).to_ne_bytes();
    }
    if !tail.is_empty() {
        let word = words[first + whole_len]
            .load(Ordering::Relaxed)
            .to_ne_bytes();
        tail.copy_from_slice(&word[..tail.len()]);
    }
}

/// Copies the words of `from` into `to` (as long), in pieces on rayon's pool when large.
fn copy_words(from: &[AtomicU32], to: &[AtomicU32]) {
    let copy = |(to, from): (&[AtomicU32], &[AtomicU32])| {
        for (to, from) in to.iter().zip(from) {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    };
    const PIECE_WORDS: usize = COPY_PIECE / 4;
    if from.len() < 2 * PIECE_WORDS {
        copy((to, from));
    } else {
        (to.par_chunks(PIECE_WORDS))
            .zip(from.par_chunks(PIECE_WORDS))
            .for_each(copy);
    }
}

/// How a copy of `len` bytes from byte `start` of a buffer splits into pieces for several
/// threads: `None` when it is too small to gain from them (under two [`COPY_PIECE`]s, as
/// `copy_in_parallel`); else the length of the first piece, which ends on a multiple of
/// `COPY_PIECE` in the buffer, and where the rest starts, each later piece `COPY_PIECE` long
/// but the last. Pieces then share no word, and only the copy's own ends can be partial words.
fn in_pieces(start: usize, len: usize) -> Option<(usize, usize)> {
    if len < 2 * COPY_PIECE {
        return None;
    }
    let first = COPY_PIECE - start % COPY_PIECE;
    Some((first, start + first))
}

fn key(storage: StorageId) -> BufferKey {
    BufferKey::from(KeyData::from_ffi(storage.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{ExecutionMode, KernelIo};

    fn whole(memory: &mut HostMemory, size: u64) -> Region {
        let storage = memory.allocate(size).expect("room for a test buffer");
        Region {
            storage,
            offset: 0,
            size,
        }
    }

    /// A scheduling bug (a copy and a kernel on the same bytes at once) must give wrong values,
    /// not undefined behaviour: `cargo +nightly miri test -p gpuworld-systems --lib host_memory`
    /// reports a data race here if either side copies through plain memory.
    #[test]
    fn a_write_racing_a_kernel_on_the_same_words_leaves_one_of_their_values() {
        let mut memory = HostMemory::new(None);
        let region = whole(&mut memory, 64);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert!(memory.write(region, &[1; 64]));
            });
            scope.spawn(|| {
                let views = [memory.view(region).expect("a live region")];
                let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
                for i in 0..16 {
                    io.store_u32(0, i, 2);
                }
            });
        });
        let bytes = memory.read(region).expect("a live region");
        for word in bytes.chunks(4) {
            assert!(
                word == [1; 4] || word == 2u32.to_ne_bytes(),
                "{word:?} is neither value"
            );
        }
    }

    #[test]
    fn a_copy_at_any_offsets_and_length_moves_exactly_its_bytes_within_and_between_buffers() {
        let mut memory = HostMemory::new(None);
        let (a, b) = (whole(&mut memory, 24), whole(&mut memory, 24));
        let pattern: Vec<u8> = (1..=24).collect();
        for (to, other) in [(a, b), (b, a)] {
            for from in 0..12u64 {
                for offset in 12..24u64 {
                    for size in 0..=(24 - offset).min(12 - from) {
                        assert!(memory.write(a, &pattern));
                        assert!(memory.write(b, &[0; 24]));
                        let src = Region {
                            offset: from,
                            size,
                            ..a
                        };
                        let dst = Region { offset, size, ..to };
                        assert!(memory.copy(src, dst));
                        let mut model = if to == a {
                            pattern.clone()
                        } else {
                            vec![0; 24]
                        };
                        let (from, offset, size) = (from as usize, offset as usize, size as usize);
                        model[offset..offset + size].copy_from_slice(&pattern[from..from + size]);
                        assert_eq!(memory.read(to), Some(model), "{from}+{size} -> {offset}");
                        let untouched = if other == a {
                            pattern.clone()
                        } else {
                            vec![0; 24]
                        };
                        assert_eq!(memory.read(other), Some(untouched));
                    }
                }
            }
        }
        let longer = Region { size: 8, ..a };
        let past_the_end = Region {
            offset: 20,
            size: 8,
            ..b
        };
        assert!(!memory.copy(longer, past_the_end), "past the end");
        assert!(
            !memory.copy(Region { size: 4, ..a }, longer),
            "sizes differ"
        );
    }

    #[test]
    // Megabytes of atomics take Miri minutes; the pieces are safe code over the same atomics.
    #[cfg_attr(miri, ignore)]
    fn large_copies_in_whole_words_and_at_odd_offsets_move_exactly_their_bytes() {
        let size = 3 * COPY_PIECE + 64;
        let mut memory = HostMemory::new(None);
        let (a, b) = (
            whole(&mut memory, size as u64),
            whole(&mut memory, size as u64),
        );
        let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        assert!(memory.write(a, &pattern));
        for (from, offset, len) in [
            (0, 32, size - 64),
            (1, 7, size - 9),
            (4, 8, 2 * COPY_PIECE + 5),
        ] {
            assert!(memory.write(b, &vec![0; size]));
            let src = Region {
                offset: from as u64,
                size: len as u64,
                ..a
            };
            let dst = Region {
                offset: offset as u64,
                ..src
            };
            assert!(memory.copy(
                src,
                Region {
                    storage: b.storage,
                    ..dst
                }
            ));
            let mut model = vec![0; size];
            model[offset..offset + len].copy_from_slice(&pattern[from..from + len]);
            assert!(
                memory.read(b).as_deref() == Some(&model[..]),
                "a copy of {len} bytes from {from} to {offset} changed other bytes"
            );
        }
    }

    #[test]
    fn a_write_at_any_offset_and_length_changes_exactly_its_bytes() {
        let mut memory = HostMemory::new(None);
        let region = whole(&mut memory, 16);
        let mut model = [0u8; 16];
        let mut next = 1u8;
        for offset in 0..16u64 {
            for size in 0..=16 - offset {
                let data: Vec<u8> = (0..size).map(|i| next.wrapping_add(i as u8)).collect();
                next = next.wrapping_add(17);
                let part = Region {
                    offset,
                    size,
                    ..region
                };
                assert!(memory.write(part, &data));
                model[offset as usize..(offset + size) as usize].copy_from_slice(&data);
                assert_eq!(memory.read(region).as_deref(), Some(&model[..]));
                assert_eq!(memory.read(part), Some(data));
            }
        }
    }

    #[test]
    // Megabytes of atomics take Miri minutes; the pieces are safe code over the same atomics.
    #[cfg_attr(miri, ignore)]
    fn large_copies_at_odd_offsets_and_lengths_move_exactly_their_bytes_in_pieces() {
        let size = 5 * COPY_PIECE + 64;
        let mut memory = HostMemory::new(None);
        let region = whole(&mut memory, size as u64);
        let mut model: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        assert!(memory.write(region, &model));
        assert_eq!(memory.read(region).as_deref(), Some(&model[..]));
        let cases = [
            (1, 2 * COPY_PIECE),
            (3, 2 * COPY_PIECE + 2),
            (COPY_PIECE - 1, 3 * COPY_PIECE + 5),
            (COPY_PIECE, 2 * COPY_PIECE),
            (COPY_PIECE + 2, 2 * COPY_PIECE + 1),
            (0, 4 * COPY_PIECE + 1),
            (5, size - 7),
        ];
        for (n, (offset, len)) in cases.into_iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + n * 13 + 1) as u8).collect();
            let part = Region {
                offset: offset as u64,
                size: len as u64,
                ..region
            };
            assert!(memory.write(part, &data));
            model[offset..offset + len].copy_from_slice(&data);
            assert!(
                memory.read(region).as_deref() == Some(&model[..]),
                "a write of {len} bytes at {offset} changed other bytes"
            );
            assert!(
                memory.read(part) == Some(data),
                "a read of {len} bytes at {offset}"
            );
        }
    }

    /// Reserved addresses with `pages` pages of the host's size, and that size.
    #[cfg(all(unix, not(miri)))]
    fn reserved(memory: &mut HostMemory, pages: u64) -> (StorageId, u64) {
        let page = HostMemory::page_mapping().expect("unix maps pages");
        let storage = memory
            .reserve_addresses(pages * page)
            .expect("room for the addresses");
        (storage, page)
    }

    #[test]
    #[cfg(all(unix, not(miri)))]
    fn mapped_pages_are_live_memory_whose_bytes_survive_until_unmapped_and_are_counted() {
        let mut memory = HostMemory::new(None);
        let (storage, page) = reserved(&mut memory, 8);
        let region = |offset, size| Region {
            storage,
            offset,
            size,
        };
        assert!(
            memory.read(region(0, 16)).is_none(),
            "no page mapped: no live memory"
        );
        memory.map_pages(storage, page, 2 * page).expect("room");
        memory.map_pages(storage, 5 * page, page).expect("room");
        assert_eq!(memory.allocated(), 3 * page);
        assert_eq!(
            memory.read(region(page, 8)),
            Some(vec![0; 8]),
            "fresh pages are zeroed"
        );
        // A region across the two neighbouring pages, at odd offsets.
        let data: Vec<u8> = (0..page + 10).map(|i| (i * 7 + 1) as u8).collect();
        let across = region(page + 5, page + 10);
        assert!(memory.write(across, &data));
        assert_eq!(memory.read(across), Some(data.clone()));
        assert!(memory.copy(region(page + 8, 64), region(5 * page + 4, 64)));
        assert_eq!(
            memory.read(region(5 * page + 4, 64)).as_deref(),
            Some(&data[3..67])
        );
        assert!(memory.view(region(5 * page, page)).is_some());
        // Regions that reach an unmapped page are not live memory: every access is refused.
        for outside in [
            region(page - 4, 8),
            region(2 * page + 8, page),
            region(0, page),
            region(4 * page, 4),
            region(7 * page, page + 4),
        ] {
            assert!(memory.view(outside).is_none(), "{outside:?}");
            assert!(memory.read(outside).is_none(), "{outside:?}");
            assert!(!memory.write(outside, &[1; 4]), "{outside:?}");
            assert!(
                !memory.copy(region(page, outside.size), outside),
                "{outside:?}"
            );
        }
        memory
            .unmap_pages(storage, page, 2 * page)
            .expect("mapped by one call");
        assert_eq!(memory.allocated(), page, "unmapped memory is returned");
        assert!(memory.read(across).is_none());
        memory.trim_pages();
        memory.map_pages(storage, page, page).expect("room");
        assert_eq!(
            memory.read(region(page, 8)),
            Some(vec![0; 8]),
            "a trimmed page maps fresh"
        );
        memory.free_addresses(storage);
        assert_eq!(memory.allocated(), 0);
        assert!(memory.read(region(page, 8)).is_none());
    }

    #[test]
    #[cfg(all(unix, not(miri)))]
    fn pages_unmapped_and_mapped_again_before_a_trim_keep_their_bytes() {
        let mut memory = HostMemory::new(None);
        let (storage, page) = reserved(&mut memory, 4);
        let region = Region {
            storage,
            offset: page,
            size: page,
        };
        memory.map_pages(storage, page, page).expect("room");
        assert!(memory.write(region, &vec![9; page as usize]));
        memory.unmap_pages(storage, page, page).expect("mapped");
        memory.map_pages(storage, page, page).expect("room");
        assert_eq!(memory.read(region), Some(vec![9; page as usize]));
        memory.trim_pages();
        assert_eq!(
            memory.read(region),
            Some(vec![9; page as usize]),
            "mapped again: the trim leaves it"
        );
    }

    #[test]
    #[cfg(all(unix, not(miri)))]
    fn pages_mapped_by_separate_calls_are_unmapped_in_any_run_of_them() {
        let mut memory = HostMemory::new(None);
        let (storage, page) = reserved(&mut memory, 8);
        let region = |offset, size| Region {
            storage,
            offset,
            size,
        };
        for first in [page, 2 * page, 4 * page] {
            memory.map_pages(storage, first, page).expect("room");
        }
        memory.map_pages(storage, 3 * page, page).expect("room");
        assert_eq!(memory.allocated(), 4 * page);
        assert!(
            memory.read(region(page, 4 * page)).is_some(),
            "one run of live memory across the calls"
        );
        // A run across two calls' pages, then the middle of what is left.
        memory
            .unmap_pages(storage, page, 2 * page)
            .expect("mapped, by two calls");
        memory.unmap_pages(storage, 3 * page, page).expect("mapped");
        assert_eq!(memory.allocated(), page);
        assert!(memory.read(region(3 * page, 4)).is_none());
        assert!(memory.read(region(4 * page, page)).is_some());
        memory.trim_pages();
        assert!(
            memory.unmap_pages(storage, 4 * page, 2 * page).is_err(),
            "a run reaching an unmapped page"
        );
        memory.free_addresses(storage);
        assert_eq!(memory.allocated(), 0);
    }

    #[test]
    #[cfg(all(unix, not(miri)))]
    fn page_mapping_is_refused_over_the_capacity_and_for_calls_that_break_the_contract() {
        let page = HostMemory::page_mapping().expect("unix maps pages");
        let mut memory = HostMemory::new(Some(3 * page));
        let (storage, _) = reserved(&mut memory, 8);
        memory
            .map_pages(storage, 0, 2 * page)
            .expect("within the capacity");
        assert_eq!(
            memory.map_pages(storage, 2 * page, 2 * page),
            Err(AllocError::OutOfMemory)
        );
        assert_eq!(memory.allocated(), 2 * page, "a refused call maps nothing");
        let refused =
            |result: Result<(), AllocError>| matches!(result, Err(AllocError::DeviceFailed { .. }));
        assert!(
            refused(memory.map_pages(storage, page, page)),
            "mapped twice"
        );
        assert!(
            refused(memory.map_pages(storage, 2 * page + 1, page)),
            "not whole pages"
        );
        assert!(
            refused(memory.map_pages(storage, 8 * page, page)),
            "outside"
        );
        assert!(
            refused(memory.unmap_pages(storage, 4 * page, page)),
            "not mapped"
        );
        let buffer = memory.allocate(64).expect("within the capacity");
        assert!(refused(memory.map_pages(buffer, 0, page)), "a buffer");
        memory.deallocate(storage);
        assert_eq!(
            memory.allocated(),
            2 * page + 64,
            "deallocate leaves reservations"
        );
        memory.free_addresses(buffer);
        assert_eq!(
            memory.allocated(),
            2 * page + 64,
            "free_addresses leaves buffers"
        );
        memory.free_addresses(storage);
        memory.deallocate(buffer);
        assert_eq!(memory.allocated(), 0);
    }

    #[test]
    fn writes_to_neighbouring_bytes_of_one_word_on_two_threads_both_land() {
        let mut memory = HostMemory::new(None);
        let region = whole(&mut memory, 8);
        let half = |offset| Region {
            offset,
            size: 2,
            ..region
        };
        for _ in 0..100 {
            std::thread::scope(|scope| {
                scope.spawn(|| memory.write(half(2), &[3, 4]));
                scope.spawn(|| memory.write(half(4), &[5, 6]));
            });
        }
        assert_eq!(memory.read(region), Some(vec![0, 0, 3, 4, 5, 6, 0, 0]));
    }
}

//! Host addresses reserved with no memory under them, and host pages mapped under them: the
//! cpu backend's page mapping (`Memory::reserve_addresses`, `map_pages`, `unmap_pages`,
//! `trim_pages`, `free_addresses`), as CUDA maps device pages under reserved device addresses.
//!
//! A reservation is one `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`: address
//! space only. Mapping pages makes them readable and writable (`mprotect`); the kernel gives them
//! memory, zeroed, at their first touch. Unmapping only takes the pages out of the mapped set, so
//! no view can be made over them any more; the next [`Reservation::trim`] returns their memory,
//! neighbours together (a call per run of pages, not per page: an unmapping call costs several
//! µs), unless a mapping took them again meanwhile (then they keep their memory, and their
//! bytes). Returning memory never unmaps the addresses: on Linux the pages are discarded
//! (`madvise(MADV_DONTNEED)`) and made inaccessible again (`mprotect(PROT_NONE)`), elsewhere
//! `PROT_NONE` memory is mapped over them (`mmap(MAP_FIXED)`, which replaces the range at once).
//!
//! Soundness: the only references into a reservation are the word slices of
//! [`Reservation::words`], made only over mapped ranges and borrowing the reservation; pages
//! leave the mapped set only through `&mut self`, so no slice covers memory that is unmapped,
//! discarded or inaccessible.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// Bytes of a host page where host memory can map pages: on unix (not under Miri, which has no
/// `mprotect`), the system's page size; else `None`.
pub(super) fn page_size() -> Option<u64> {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: `sysconf` reads a configuration value; it touches no memory of ours.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(page).ok().filter(|&page| page >= 64)
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        None
    }
}

/// Disjoint half-open byte ranges, start to end, neighbours merged.
#[derive(Debug, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `[start, end)`, merging it with the ranges it touches.
    fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        if let Some((&before, &before_end)) = self.0.range(..=start).next_back()
            && before_end >= start
        {
            start = before;
            end = end.max(before_end);
        }
        while let Some((&next, &next_end)) = self.0.range(start..).next()
            && next <= end
        {
            self.0.remove(&next);
            end = end.max(next_end);
        }
        self.0.insert(start, end);
    }

    /// Takes `[start, end)` out, splitting the ranges it cuts.
    fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        if let Some((&before, &before_end)) = self.0.range(..start).next_back()
            && before_end > start
        {
            self.0.insert(before, start);
            if before_end > end {
                self.0.insert(end, before_end);
            }
        }
        while let Some((&next, &next_end)) = self.0.range(start..end).next() {
            self.0.remove(&next);
            if next_end > end {
                self.0.insert(end, next_end);
            }
        }
    }

    /// Whether one range holds all of `[start, end)` (for an empty one: holds or ends at `start`).
    fn covers(&self, start: u64, end: u64) -> bool {
        self.0
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &range_end)| range_end >= end && (range_end > start || start == end))
    }

    /// Whether no range overlaps `[start, end)`.
    fn misses(&self, start: u64, end: u64) -> bool {
        let before = self.0.range(..start).next_back();
        before.is_none_or(|(_, &before_end)| before_end <= start)
            && self.0.range(start..end).next().is_none()
    }

    /// Bytes in all.
    fn bytes(&self) -> u64 {
        self.0.iter().map(|(start, end)| end - start).sum()
    }
}

/// Why a reservation's call failed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PagesError {
    /// The host refused memory (or address space).
    OutOfMemory,
    /// The call broke its contract (pages not whole, outside the reservation, mapped twice).
    Misuse(&'static str),
}

/// Host addresses reserved once, with pages mapped under some of them.
pub(super) struct Reservation {
    /// The first byte, page aligned.
    base: NonNull<AtomicU32>,
    /// Bytes reserved, whole pages.
    size: u64,
    page: u64,
    /// What views may cover.
    mapped: Ranges,
    /// Unmapped since the last trim, still readable and writable: their memory goes back at the
    /// next trim.
    unmapped: Ranges,
}

// SAFETY: the reservation owns its addresses (nothing else maps or unmaps them), and every access
// to its memory is an atomic on a word through `words`, so it may move to and be shared between
// threads like the `Box<[AtomicU32]>` of a host buffer.
unsafe impl Send for Reservation {}
// SAFETY: as for `Send`: `&Reservation` only reads its books and lends slices of atomics.
unsafe impl Sync for Reservation {}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("size", &self.size)
            .field("mapped", &self.mapped.bytes())
            .field("unmapped", &self.unmapped.bytes())
            .finish()
    }
}

impl Reservation {
    /// Reserves `size` bytes of addresses (rounded up to whole pages) with no memory under them;
    /// `None` where the host cannot map pages or refuses the addresses.
    pub(super) fn new(size: u64) -> Option<Reservation> {
        let page = page_size()?;
        let size = size.max(1).checked_next_multiple_of(page)?;
        let base = os::reserve(usize::try_from(size).ok()?)?;
        Some(Reservation {
            base,
            size,
            page,
            mapped: Ranges::default(),
            unmapped: Ranges::default(),
        })
    }

    /// Bytes mapped.
    pub(super) fn mapped_bytes(&self) -> u64 {
        self.mapped.bytes()
    }

    /// `[offset, offset + len)` as whole pages within the reservation.
    fn pages(&self, offset: u64, len: u64) -> Result<(u64, u64), PagesError> {
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.size && len > 0)
            .ok_or(PagesError::Misuse("pages outside the reserved addresses"))?;
        if !offset.is_multiple_of(self.page) || !len.is_multiple_of(self.page) {
            return Err(PagesError::Misuse("not whole pages"));
        }
        Ok((offset, end))
    }

    /// Maps the `len` bytes of pages at `offset`, none of them mapped: readable and writable,
    /// zeroed where fresh (pages unmapped since the last trim keep their bytes).
    pub(super) fn map(&mut self, offset: u64, len: u64) -> Result<(), PagesError> {
        let (start, end) = self.pages(offset, len)?;
        if !self.mapped.misses(start, end) {
            return Err(PagesError::Misuse("pages mapped twice"));
        }
        // SAFETY: `[start, end)` lies within the reservation (checked above), whose addresses
        // this value owns; making pages accessible invalidates no reference.
        if !unsafe { os::protect_read_write(self.at(start), (end - start) as usize) } {
            return Err(PagesError::OutOfMemory);
        }
        self.unmapped.remove(start, end);
        self.mapped.insert(start, end);
        Ok(())
    }

    /// Unmaps the `len` bytes of mapped pages at `offset`: no view may cover them from now on,
    /// and their memory goes back at the next [`Reservation::trim`].
    pub(super) fn unmap(&mut self, offset: u64, len: u64) -> Result<(), PagesError> {
        let (start, end) = self.pages(offset, len)?;
        if !self.mapped.covers(start, end) {
            return Err(PagesError::Misuse("pages not mapped"));
        }
        self.mapped.remove(start, end);
        self.unmapped.insert(start, end);
        Ok(())
    }

    /// Returns the memory of the pages unmapped since the last call and not mapped again, a call
    /// per run of neighbouring pages.
    pub(super) fn trim(&mut self) {
        for (start, end) in std::mem::take(&mut self.unmapped).0 {
            // SAFETY: the range lies within the reservation and is not mapped: `&mut self` holds
            // no view, and no view can be made over it (`words` checks the mapped set).
            unsafe { os::discard(self.at(start), (end - start) as usize) };
        }
    }

    /// The words holding `[offset, offset + len)`, from the word of its first byte to that of
    /// its last (none for an empty range), where every one of its bytes is mapped; `None` else.
    pub(super) fn words(&self, offset: u64, len: u64) -> Option<&[AtomicU32]> {
        let end = offset.checked_add(len).filter(|&end| end <= self.size)?;
        if !self.mapped.covers(offset, end) {
            return None;
        }
        let first = offset / 4;
        let count = usize::try_from(end.div_ceil(4).saturating_sub(first)).ok()?;
        // SAFETY: pages are mapped whole and a page is a multiple of 4 bytes, so the words from
        // `first` lie in the mapped range that holds the bytes: readable and writable memory,
        // initialised (the kernel zeroes fresh pages), 4-aligned (the base is page aligned),
        // inside the reservation. It stays mapped while `self` is borrowed: pages leave the
        // mapped set only through `&mut self`. Words are only ever accessed as atomics.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(usize::try_from(first).ok()?), count)
        })
    }

    /// The address of byte `offset` (within the reservation).
    fn at(&self, offset: u64) -> *mut u8 {
        // SAFETY: callers pass offsets within the reservation, one mapping of `size` bytes from
        // `base`, so the pointer stays in it.
        unsafe { self.base.as_ptr().cast::<u8>().add(offset as usize) }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no view of the reservation is alive, and these addresses are
        // this value's, reserved by `os::reserve` with this size.
        unsafe { os::release(self.base, self.size as usize) };
    }
}

/// The system calls, on unix.
#[cfg(all(unix, not(miri)))]
mod os {
    use std::ptr::NonNull;
    use std::sync::atomic::AtomicU32;

    /// `len` bytes of fresh addresses with no memory and no access.
    pub(super) fn reserve(len: usize) -> Option<NonNull<AtomicU32>> {
        // SAFETY: a new private anonymous mapping at an address the kernel picks: it replaces
        // nothing.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(base.cast())
    }

    /// Makes `len` bytes at `at` readable and writable; false if the kernel refused (no memory
    /// for its books, or too many mappings).
    ///
    /// # Safety
    /// The range lies within a live reservation.
    pub(super) unsafe fn protect_read_write(at: *mut u8, len: usize) -> bool {
        // SAFETY: the caller's range is within our reservation; adding access breaks nothing.
        unsafe { libc::mprotect(at.cast(), len, libc::PROT_READ | libc::PROT_WRITE) == 0 }
    }

    /// Returns the memory of `len` bytes at `at` and takes their access away; the addresses
    /// stay reserved. A refusal leaves memory behind, never a hole in the reservation.
    ///
    /// # Safety
    /// The range lies within a live reservation and no reference covers it.
    pub(super) unsafe fn discard(at: *mut u8, len: usize) {
        #[cfg(target_os = "linux")]
        // SAFETY: no reference covers the range (the caller's promise); discarding private
        // anonymous pages zeroes them and removing access affects only our reservation.
        unsafe {
            libc::madvise(at.cast(), len, libc::MADV_DONTNEED);
            libc::mprotect(at.cast(), len, libc::PROT_NONE);
        }
        #[cfg(not(target_os = "linux"))]
        // SAFETY: as above; `MAP_FIXED` over our own reserved range replaces it at once with
        // fresh inaccessible addresses.
        unsafe {
            libc::mmap(
                at.cast(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            );
        }
    }

    /// Returns the reservation's addresses and memory.
    ///
    /// # Safety
    /// `base` and `len` are those of one `reserve`, and no reference covers it.
    pub(super) unsafe fn release(base: NonNull<AtomicU32>, len: usize) {
        // SAFETY: the caller's promise: the whole mapping, unreferenced.
        unsafe { libc::munmap(base.as_ptr().cast(), len) };
    }
}

/// No page mapping: `page_size` is `None`, so no reservation is ever made.
#[cfg(not(all(unix, not(miri))))]
mod os {
    use std::ptr::NonNull;
    use std::sync::atomic::AtomicU32;

    pub(super) fn reserve(_len: usize) -> Option<NonNull<AtomicU32>> {
        None
    }

    pub(super) unsafe fn protect_read_write(_at: *mut u8, _len: usize) -> bool {
        false
    }

    pub(super) unsafe fn discard(_at: *mut u8, _len: usize) {}

    pub(super) unsafe fn release(_base: NonNull<AtomicU32>, _len: usize) {}
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn ranges_merge_neighbours_split_on_removal_and_answer_cover_and_overlap() {
        let mut ranges = Ranges::default();
        ranges.insert(0, 4);
        ranges.insert(8, 12);
        ranges.insert(4, 8);
        assert_eq!(ranges.0.iter().collect::<Vec<_>>(), [(&0, &12)]);
        ranges.remove(2, 6);
        assert_eq!(ranges.0.iter().collect::<Vec<_>>(), [(&0, &2), (&6, &12)]);
        assert!(ranges.covers(6, 12) && ranges.covers(0, 2) && ranges.covers(2, 2));
        assert!(!ranges.covers(1, 7) && !ranges.covers(4, 4));
        assert!(ranges.misses(2, 6) && !ranges.misses(1, 3) && !ranges.misses(5, 7));
        ranges.insert(1, 20);
        assert_eq!(ranges.0.iter().collect::<Vec<_>>(), [(&0, &20)]);
        ranges.remove(0, 20);
        assert!(ranges.0.is_empty());
        assert_eq!(ranges.bytes(), 0);
    }
}

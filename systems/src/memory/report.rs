//! What each pool reports: pages now and at peak, live allocations, bytes in use and reserved,
//! the largest allocation it served, the pages and bytes it asked the device for over its life.
//! One stable text line per pool for snapshots (the lifetime totals are not in it).

use std::fmt;

/// Running counts of one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolReport {
    /// What the pool is (kind, page size, size limit), as text.
    pub name: String,
    /// Pages (backend buffers) held now.
    pub pages: usize,
    /// Most pages held at once.
    pub peak_pages: usize,
    /// Live allocations.
    pub allocs: u64,
    /// Bytes requested by live allocations.
    pub bytes_in_use: u64,
    /// Bytes held from the device.
    pub bytes_reserved: u64,
    /// Largest request it ever served.
    pub largest_alloc: u64,
    /// Pages (backend buffers) it asked the device for over its life.
    pub pages_allocated: u64,
    /// Bytes of those pages.
    pub bytes_allocated: u64,
    /// Bytes of live blocks compactions moved over its life (a compacting pool's).
    pub bytes_moved: u64,
    /// Live blocks compactions moved over its life.
    pub blocks_moved: u64,
}

impl PoolReport {
    /// An empty report for a pool described by `name`.
    pub(crate) fn new(name: String) -> PoolReport {
        PoolReport {
            name,
            ..PoolReport::default()
        }
    }

    /// Counts a new page of `size` bytes.
    pub(crate) fn page_added(&mut self, size: u64) {
        self.pages_added(1, size);
    }

    /// Counts a page of `size` bytes returned to the device.
    pub(crate) fn page_removed(&mut self, size: u64) {
        self.pages_removed(1, size);
    }

    /// Counts `count` new pages of `size` bytes each, mapped together.
    pub(crate) fn pages_added(&mut self, count: u64, size: u64) {
        let pages = usize::try_from(count).unwrap_or(usize::MAX);
        self.pages = self.pages.saturating_add(pages);
        self.pages_allocated += count;
        self.bytes_allocated += count * size;
        self.peak_pages = self.peak_pages.max(self.pages);
        self.bytes_reserved += count * size;
    }

    /// Counts `count` pages of `size` bytes each returned together.
    pub(crate) fn pages_removed(&mut self, count: u64, size: u64) {
        let pages = usize::try_from(count).unwrap_or(usize::MAX);
        self.pages = self.pages.saturating_sub(pages);
        self.bytes_reserved -= count * size;
    }

    /// Counts an allocation of `requested` bytes.
    pub(crate) fn reserved(&mut self, requested: u64) {
        self.allocs += 1;
        self.bytes_in_use += requested;
        self.largest_alloc = self.largest_alloc.max(requested);
    }

    /// Counts a live allocation's memory handed to a new request of `requested` bytes.
    pub(crate) fn resized(&mut self, before: u64, requested: u64) {
        self.bytes_in_use = self.bytes_in_use - before + requested;
        self.largest_alloc = self.largest_alloc.max(requested);
    }

    /// Counts a released allocation of `requested` bytes.
    pub(crate) fn released(&mut self, requested: u64) {
        self.allocs -= 1;
        self.bytes_in_use -= requested;
    }
}

impl fmt::Display for PoolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: pages {} (peak {}) allocs {} in use {}B reserved {}B largest {}",
            self.name,
            self.pages,
            self.peak_pages,
            self.allocs,
            self.bytes_in_use,
            self.bytes_reserved,
            human_bytes(self.largest_alloc)
        )?;
        if self.blocks_moved > 0 {
            write!(
                f,
                " moved {}B in {} blocks",
                self.bytes_moved, self.blocks_moved
            )?;
        }
        Ok(())
    }
}

/// `n` bytes in the largest binary unit that divides it exactly (`4MiB`, `1280B`); `any` for
/// `u64::MAX`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    if n == u64::MAX {
        return "any".to_string();
    }
    UNITS
        .iter()
        .find(|(unit, _)| n >= *unit && n.is_multiple_of(*unit))
        .map_or_else(
            || format!("{n}B"),
            |(unit, name)| format!("{}{name}", n / unit),
        )
}

//! [`MemoryUsage`]: how much device memory is used and reserved, and [`ReadableBytes`], how
//! messages write an amount of it. A leaf of the crate, so errors can report both without
//! importing the memory pools.

use std::fmt;

/// How much memory is used and reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Live allocations.
    pub number_allocs: u64,
    /// Bytes requested by live allocations.
    pub bytes_in_use: u64,
    /// Bytes lost to alignment in live allocations.
    pub bytes_padding: u64,
    /// Bytes held from the device, used or free.
    pub bytes_reserved: u64,
}

impl MemoryUsage {
    /// Bytes held from the device that no live allocation holds: free in the pools, or parked
    /// by a stream for its next allocation.
    pub fn bytes_cached(&self) -> u64 {
        self.bytes_reserved
            .saturating_sub(self.bytes_in_use)
            .saturating_sub(self.bytes_padding)
    }
}

/// A byte count for people: bytes below 1 KiB, else two decimals of the largest binary unit
/// that keeps the number at or above 1 (`512 B`, `1.50 KiB`, `3.00 GiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadableBytes(pub u64);

impl fmt::Display for ReadableBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let bytes = self.0;
        if bytes < 1024 {
            return write!(f, "{bytes} B");
        }
        let mut value = bytes as f64 / 1024.0;
        let mut unit = 0;
        // Rounding to two decimals may reach 1024.00: such a value is written in the next unit.
        while value >= 1024.0 - 0.005 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_the_largest_unit_that_keeps_them_at_or_above_one() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.00 KiB"),
            (1536, "1.50 KiB"),
            ((1 << 20) - 1, "1.00 MiB"),
            (3 << 30, "3.00 GiB"),
            (2_147_483_647, "2.00 GiB"),
            (5 << 40, "5.00 TiB"),
            (u64::MAX, "16.00 EiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(ReadableBytes(bytes).to_string(), text, "{bytes} bytes");
        }
    }

    #[test]
    fn cached_bytes_are_the_reserved_bytes_no_live_allocation_holds() {
        let usage = MemoryUsage {
            number_allocs: 2,
            bytes_in_use: 1000,
            bytes_padding: 24,
            bytes_reserved: 4096,
        };
        assert_eq!(usage.bytes_cached(), 4096 - 1024);
    }
}

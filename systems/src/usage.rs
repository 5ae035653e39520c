//! [`MemoryUsage`]: how much device memory is used and reserved. A leaf of the crate, so errors
//! can report it without importing the memory pools.

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

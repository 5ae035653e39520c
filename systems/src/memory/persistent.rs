//! Persistent pool: allocations made in `Persistent` mode (model weights, long-lived state) get
//! exact-size buffers, bucketed by size. Freed buffers stay reserved for the next allocation of
//! the same size, in any mode, and go back to the device only on an explicit cleanup.

use crate::memory::exclusive::{ExclusivePool, Fit};

/// The persistent pool: an exclusive pool with exact-size reuse and no periodic release.
pub fn persistent_pool() -> ExclusivePool {
    ExclusivePool::new(
        "persistent, exact-size buckets".to_string(),
        Fit::Exact,
        None,
        None,
    )
}

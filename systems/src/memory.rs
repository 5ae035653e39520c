//! Device memory behind generational keys: exact-size reuse of released buffers, usage
//! accounting, cleanup, and one retry after a cleanup when the device runs out.

use crate::backend::{AllocError, Backend, StorageId};
use crate::error::Error;
use bevy_ecs::resource::Resource;
use slotmap::{SlotMap, new_key_type};
use std::collections::BTreeMap;

new_key_type! {
    /// A slice of device memory; generational, so a stale key is detected, never misread.
    pub struct SliceKey;
}

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

struct Slice {
    storage: StorageId,
    padded: u64,
    requested: u64,
    free: bool,
}

/// The memory pool of a runtime.
#[derive(Resource)]
pub struct MemoryPool {
    slices: SlotMap<SliceKey, Slice>,
    free_by_size: BTreeMap<u64, Vec<SliceKey>>,
    alignment: u64,
    usage: MemoryUsage,
    peak_in_use: u64,
}

impl MemoryPool {
    /// An empty pool whose allocations are multiples of `alignment` bytes.
    pub fn new(alignment: u64) -> MemoryPool {
        MemoryPool {
            slices: SlotMap::with_key(),
            free_by_size: BTreeMap::new(),
            alignment: alignment.max(1),
            usage: MemoryUsage::default(),
            peak_in_use: 0,
        }
    }

    /// Current usage.
    pub fn usage(&self) -> MemoryUsage {
        self.usage
    }

    /// Highest `bytes_in_use` seen.
    pub fn peak_in_use(&self) -> u64 {
        self.peak_in_use
    }

    fn padded(&self, size: u64) -> u64 {
        size.max(1).div_ceil(self.alignment) * self.alignment
    }

    /// Reserves `size` bytes, reusing a free slice of the same padded size when there is one.
    pub fn reserve<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
    ) -> Result<(SliceKey, StorageId), Error> {
        let padded = self.padded(size);
        let reused = self.free_by_size.get_mut(&padded).and_then(Vec::pop);
        let key = match reused {
            Some(key) => key,
            None => {
                let storage = match backend.allocate(padded) {
                    Ok(storage) => storage,
                    Err(AllocError::OutOfMemory) => {
                        self.cleanup(backend);
                        backend.allocate(padded).map_err(|_| Error::OutOfMemory {
                            requested: size,
                            usage: self.usage,
                        })?
                    }
                };
                self.usage.bytes_reserved += padded;
                self.slices.insert(Slice {
                    storage,
                    padded,
                    requested: 0,
                    free: true,
                })
            }
        };
        let slice = &mut self.slices[key];
        slice.free = false;
        slice.requested = size;
        self.usage.number_allocs += 1;
        self.usage.bytes_in_use += size;
        self.usage.bytes_padding += padded - size;
        self.peak_in_use = self.peak_in_use.max(self.usage.bytes_in_use);
        Ok((key, slice.storage))
    }

    /// Makes a slice available for reuse; the caller proved the device is done with it.
    pub fn release(&mut self, key: SliceKey) -> Result<(), Error> {
        let slice = self
            .slices
            .get_mut(key)
            .filter(|s| !s.free)
            .ok_or_else(|| Error::StaleHandle {
                what: format!("memory slice {key:?}").into(),
            })?;
        slice.free = true;
        self.usage.number_allocs -= 1;
        self.usage.bytes_in_use -= slice.requested;
        self.usage.bytes_padding -= slice.padded - slice.requested;
        self.free_by_size.entry(slice.padded).or_default().push(key);
        Ok(())
    }

    /// Returns every free slice's buffer to the device.
    pub fn cleanup<B: Backend>(&mut self, backend: &mut B) {
        for (_, keys) in std::mem::take(&mut self.free_by_size) {
            for key in keys {
                if let Some(slice) = self.slices.remove(key) {
                    backend.deallocate(slice.storage);
                    self.usage.bytes_reserved -= slice.padded;
                }
            }
        }
    }

    /// Number of free slices waiting for reuse.
    pub fn free_slices(&self) -> usize {
        self.free_by_size.values().map(Vec::len).sum()
    }
}

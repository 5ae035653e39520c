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

    /// Lets the pool return long-unused free memory; called by the GC stage every tick.
    pub fn periodic_cleanup<B: Backend>(&mut self, _backend: &mut B, _tick: u64) {}

    /// The pool's state as stable text lines for `Runtime::snapshot()`.
    pub fn describe(&self) -> String {
        let usage = self.usage;
        format!(
            "memory: allocs {} in use {}B padding {}B reserved {}B free slices {}\n",
            usage.number_allocs,
            usage.bytes_in_use,
            usage.bytes_padding,
            usage.bytes_reserved,
            self.free_slices()
        )
    }

    /// Number of free slices waiting for reuse.
    pub fn free_slices(&self) -> usize {
        self.free_by_size.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimBackend, SimConfig};

    fn device(memory_bytes: u64) -> SimBackend {
        SimBackend::new(SimConfig {
            memory_bytes,
            ..Default::default()
        })
    }

    #[test]
    fn a_released_slice_is_reused_for_the_same_padded_size() {
        let mut backend = device(1 << 20);
        let mut pool = MemoryPool::new(256);
        let (first, storage) = pool.reserve(&mut backend, 100).unwrap();
        pool.release(first).unwrap();
        let (second, reused) = pool.reserve(&mut backend, 200).unwrap();
        assert_eq!(reused, storage, "200 B pads to the same 256 B slice");
        assert_eq!(second, first);
        assert_eq!(backend.allocated(), 256);
        let usage = pool.usage();
        assert_eq!(
            (
                usage.number_allocs,
                usage.bytes_in_use,
                usage.bytes_padding,
                usage.bytes_reserved
            ),
            (1, 200, 56, 256)
        );
    }

    #[test]
    fn releasing_twice_is_a_stale_key_error() {
        let mut backend = device(1 << 20);
        let mut pool = MemoryPool::new(256);
        let (key, _) = pool.reserve(&mut backend, 64).unwrap();
        pool.release(key).unwrap();
        assert!(matches!(pool.release(key), Err(Error::StaleHandle { .. })));
        pool.cleanup(&mut backend);
        assert!(matches!(pool.release(key), Err(Error::StaleHandle { .. })));
    }

    #[test]
    fn cleanup_returns_every_free_slice_to_the_device() {
        let mut backend = device(1 << 20);
        let mut pool = MemoryPool::new(256);
        let keys: Vec<_> = (1..=4)
            .map(|i| pool.reserve(&mut backend, i * 300).unwrap().0)
            .collect();
        let kept = pool.reserve(&mut backend, 10).unwrap();
        for key in keys {
            pool.release(key).unwrap();
        }
        pool.cleanup(&mut backend);
        assert_eq!(pool.usage().bytes_reserved, 256);
        assert_eq!(backend.allocated(), 256);
        assert_eq!(pool.free_slices(), 0);
        pool.release(kept.0).unwrap();
        pool.cleanup(&mut backend);
        assert_eq!(pool.usage(), MemoryUsage::default());
        assert_eq!(backend.allocated(), 0);
    }

    #[test]
    fn out_of_memory_cleans_up_and_retries_once_before_failing() {
        let mut backend = device(1024);
        let mut pool = MemoryPool::new(256);
        let (free_me, _) = pool.reserve(&mut backend, 512).unwrap();
        let (_kept, _) = pool.reserve(&mut backend, 256).unwrap();
        pool.release(free_me).unwrap();
        // 768 B fits only once the free 512 B slice went back to the device.
        assert!(pool.reserve(&mut backend, 768).is_ok());
        let error = pool.reserve(&mut backend, 4096).unwrap_err();
        assert!(
            matches!(
                error,
                Error::OutOfMemory {
                    requested: 4096,
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(pool.usage().bytes_in_use, 256 + 768);
    }
}

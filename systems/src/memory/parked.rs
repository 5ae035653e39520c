//! Parked slices: memory of released handles whose every use was on one stream. That stream runs
//! its work in order, so its own later allocations may take the memory at once (what PyTorch's
//! caching allocator and cubecl do); every other stream waits until the GC stage has seen an
//! event prove the device is done, and releases the slice into its pool.

use crate::memory::SliceKey;
use bevy_ecs::entity::Entity;
use std::collections::BTreeMap;

/// Parked slices by stream, then by block length (padding included).
#[derive(Debug, Default)]
pub struct ParkedSlices {
    streams: Vec<(Entity, BTreeMap<u64, Vec<SliceKey>>)>,
    count: usize,
    bytes: u64,
}

impl ParkedSlices {
    /// Parks `key`, a block of `len` bytes, for reuse by `stream`.
    pub fn park(&mut self, stream: Entity, len: u64, key: SliceKey) {
        let index = match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(index) => index,
            None => {
                self.streams.push((stream, BTreeMap::new()));
                self.streams.len() - 1
            }
        };
        self.streams[index].1.entry(len).or_default().push(key);
        self.count += 1;
        self.bytes += len;
    }

    /// Takes the smallest block parked by `stream` that holds `padded` bytes and is at most
    /// `largest` bytes long; returns its key and length.
    pub fn take(&mut self, stream: Entity, padded: u64, largest: u64) -> Option<(SliceKey, u64)> {
        if self.count == 0 {
            return None;
        }
        let blocks = &mut self.streams.iter_mut().find(|(s, _)| *s == stream)?.1;
        let (&len, keys) = blocks.range_mut(padded..=largest).next()?;
        let key = keys.pop()?;
        if keys.is_empty() {
            blocks.remove(&len);
        }
        self.count -= 1;
        self.bytes -= len;
        Some((key, len))
    }

    /// Removes `key`, a block of `len` bytes parked by `stream`; whether it was parked.
    pub fn remove(&mut self, stream: Entity, len: u64, key: SliceKey) -> bool {
        let Some((_, blocks)) = self.streams.iter_mut().find(|(s, _)| *s == stream) else {
            return false;
        };
        let Some(keys) = blocks.get_mut(&len) else {
            return false;
        };
        let Some(index) = keys.iter().position(|&k| k == key) else {
            return false;
        };
        keys.swap_remove(index);
        if keys.is_empty() {
            blocks.remove(&len);
        }
        self.count -= 1;
        self.bytes -= len;
        true
    }

    /// Number of parked slices.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of parked blocks, padding included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

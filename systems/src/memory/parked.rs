//! Parked slices: memory of released handles whose every use was on one stream. That stream runs
//! its work in order, so its own later allocations may take the memory at once, whole or in part
//! (what PyTorch's caching allocator and cubecl do); every other stream waits until an event
//! proved the device is done (`stages/lifetime.rs` decides when: its steps 1 and 4; this file
//! only keeps the books).
//!
//! Each stream's parked blocks form a free list of its own: by length for best fit, and by place
//! so that neighbours parked in the same tick join (`MemoryPool::park`). The pool's parking
//! methods, which keep these books, live in `parking.rs`.

use super::block::{Block, PageKey, SliceKey};
use super::pool::PoolIndex;
use bevy_ecs::entity::Entity;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Where a parked block lies: persistent pool or not, its ladder pool, page and offset.
type Place = (bool, usize, PageKey, u64);

/// The place of `block`, held by the pool `pool` names.
fn place(pool: PoolIndex, block: &Block) -> Place {
    (
        pool == PoolIndex::Persistent,
        block.pool,
        block.page,
        block.offset,
    )
}

/// One stream's parked blocks.
#[derive(Debug)]
struct Stream {
    stream: Entity,
    /// By length (padding included), then key: best fit is the first at or after a request.
    by_len: BTreeSet<(u64, SliceKey)>,
    /// By place: a block's neighbours in its page.
    by_place: BTreeMap<Place, (u64, SliceKey)>,
}

/// Parked blocks by stream.
#[derive(Debug, Default)]
pub struct ParkedSlices {
    streams: Vec<Stream>,
    count: usize,
    bytes: u64,
}

impl ParkedSlices {
    fn stream(&self, stream: Entity) -> Option<&Stream> {
        self.streams.iter().find(|s| s.stream == stream)
    }

    /// Parks `key`, whose block `block` the pool `pool` holds, for reuse by `stream`.
    pub fn park(&mut self, stream: Entity, pool: PoolIndex, block: &Block, key: SliceKey) {
        let index = match self.streams.iter().position(|s| s.stream == stream) {
            Some(index) => index,
            None => {
                self.streams.push(Stream {
                    stream,
                    by_len: BTreeSet::new(),
                    by_place: BTreeMap::new(),
                });
                self.streams.len() - 1
            }
        };
        let parked = &mut self.streams[index];
        parked.by_len.insert((block.len, key));
        parked.by_place.insert(place(pool, block), (block.len, key));
        self.count += 1;
        self.bytes += block.len;
    }

    /// Removes `key`, parked by `stream` at `block` of the pool `pool` names; whether it was
    /// parked.
    pub fn remove(
        &mut self,
        stream: Entity,
        pool: PoolIndex,
        block: &Block,
        key: SliceKey,
    ) -> bool {
        let Some(parked) = self.streams.iter_mut().find(|s| s.stream == stream) else {
            return false;
        };
        if !parked.by_len.remove(&(block.len, key)) {
            return false;
        }
        parked.by_place.remove(&place(pool, block));
        self.count -= 1;
        self.bytes -= block.len;
        true
    }

    /// The blocks `stream` parked that hold `padded` bytes, shortest first: `(length, key)`.
    pub fn fitting(&self, stream: Entity, padded: u64) -> impl Iterator<Item = (u64, SliceKey)> {
        self.stream(stream)
            .into_iter()
            .flat_map(move |parked| {
                // The null key orders after every key in use: start past the last shorter block.
                let shorter = (padded.saturating_sub(1), SliceKey::default());
                parked
                    .by_len
                    .range((Bound::Excluded(shorter), Bound::Unbounded))
            })
            .copied()
    }

    /// The blocks `stream` parked right before and right after `block` in its page.
    pub fn neighbours(
        &self,
        stream: Entity,
        pool: PoolIndex,
        block: &Block,
    ) -> (Option<SliceKey>, Option<SliceKey>) {
        let Some(parked) = self.stream(stream) else {
            return (None, None);
        };
        let at = place(pool, block);
        let before = parked
            .by_place
            .range(..at)
            .next_back()
            .filter(|((persistent, index, page, offset), (len, _))| {
                (*persistent, *index, *page) == (at.0, at.1, at.2) && offset + len == at.3
            })
            .map(|(_, &(_, key))| key);
        let after = parked
            .by_place
            .get(&(at.0, at.1, at.2, at.3 + block.len))
            .map(|&(_, key)| key);
        (before, after)
    }

    /// The longest block any stream parked that is shorter than `padded` bytes: `(length, key)`.
    pub fn longest_below(&self, padded: u64) -> Option<(u64, SliceKey)> {
        self.streams
            .iter()
            .filter_map(|parked| {
                parked
                    .by_len
                    // The null key orders after every key in use.
                    .range(..=(padded.checked_sub(1)?, SliceKey::default()))
                    .next_back()
                    .copied()
            })
            .max()
    }

    /// Every block `stream` parked.
    pub fn of_stream(&self, stream: Entity) -> impl Iterator<Item = SliceKey> {
        (self.stream(stream).into_iter())
            .flat_map(|parked| parked.by_len.iter().map(|&(_, key)| key))
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

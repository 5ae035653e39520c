//! How the pool reserves memory: from the persistent buckets or the ladder, cleaning up and
//! retrying once when the device refuses, and compacting (moving live blocks, or emptying
//! pages to retire) when a request fits no free range at the budget.

use super::*;

impl MemoryPool {
    /// Reserves `size` bytes in `mode`: from free memory when some fits, else from a new page;
    /// when the device refuses, cleans up and retries once before reporting out of memory. A
    /// request over the device's largest buffer is refused first, with nothing cleaned up.
    pub fn reserve<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        mode: AllocationMode,
    ) -> Result<Reservation, MemoryError> {
        self.reserve_with(backend, size, mode, None)
    }

    /// [`MemoryPool::reserve`], where a request that would take the pools past their budget may
    /// first make room by moving live slices `compaction` lets go ([`MemoryPool::reserve_moving`]).
    pub fn reserve_with<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        mode: AllocationMode,
        compaction: Option<Compaction<'_>>,
    ) -> Result<Reservation, MemoryError> {
        if let Some(limit) = self.max_buffer
            && size > limit
        {
            return Err(MemoryError::BufferTooLarge {
                requested: size,
                limit,
            });
        }
        let padded = self.padded(size).ok_or_else(|| self.out_of_memory(size))?;
        let mut copies = false;
        let (pool, block) = match mode {
            AllocationMode::Persistent => (
                PoolIndex::Persistent,
                self.reserve_persistent(backend, padded, size)?,
            ),
            AllocationMode::Auto => match self.persistent.try_reserve(padded, size) {
                Some(block) => (PoolIndex::Persistent, block),
                None => (
                    PoolIndex::Ladder,
                    self.reserve_from_ladder(backend, padded, size, compaction, &mut copies)?,
                ),
            },
        };
        debug_assert!(
            block.offset.is_multiple_of(self.alignment) && block.len >= padded,
            "{block:?} for {padded} bytes breaks the alignment of {}",
            self.alignment
        );
        let slice = self.slices.insert(SliceRecord {
            pool,
            block,
            requested: size,
            parked_on: None,
            group: None,
        });
        self.count_reserved(size, block.len);
        Ok(Reservation {
            slice,
            region: Region {
                storage: block.storage,
                offset: block.offset,
                size,
            },
            parked_by_stream: copies,
        })
    }

    pub(super) fn reserve_persistent<B: Backend>(
        &mut self,
        backend: &mut B,
        padded: u64,
        size: u64,
    ) -> Result<Block, MemoryError> {
        if let Some(block) = self.persistent.try_reserve(padded, size) {
            return Ok(block);
        }
        let grown = match self.persistent.grow(backend, padded, size) {
            Err(AllocError::OutOfMemory) => {
                self.cleanup(backend);
                self.persistent.grow(backend, padded, size)
            }
            grown => grown,
        };
        self.account_growth(grown, size)?
            .ok_or_else(|| self.out_of_memory(size))
    }

    /// The ladder places the request in free memory (its own pool's, else another sliced
    /// pool's); failing that, it grows (after idle memory past the budget went back), and when
    /// the device refuses, everything free goes back and it asks once more.
    pub(super) fn reserve_from_ladder<B: Backend>(
        &mut self,
        backend: &mut B,
        padded: u64,
        size: u64,
        compaction: Option<Compaction<'_>>,
        copies: &mut bool,
    ) -> Result<Block, MemoryError> {
        if let Some(block) = self.ladder.try_reserve(padded, size) {
            return Ok(block);
        }
        if let Some(compaction) = compaction
            && self.over_budget(padded) > 0
        {
            match self.compact(padded, size, compaction, copies) {
                (Some(block), _) => return Ok(block),
                // Pages emptied for the request retire once the copies reading them were
                // submitted: the caller waits for them (`MemoryPool::retiring`) and asks again.
                (None, retiring) if retiring > 0 => return Err(self.out_of_memory(size)),
                (None, _) => {}
            }
        }
        // A buffer that grows is released parked (its stream wrote it) before its next size is
        // asked for: the pool decides, as for an idle page, whether its page was the last size.
        if let Some((_, key)) = self.parked.longest_below(padded)
            && let Some(record) = self.slices.get(key)
            && record.pool == PoolIndex::Ladder
        {
            let block = record.block;
            self.ladder.parked_growth(&block);
        }
        self.make_room(backend, padded);
        let room = self
            .recent_peak
            .budget(self.usage.bytes_in_use.saturating_add(padded))
            .saturating_sub(self.usage.bytes_reserved);
        self.ladder.set_room(room, self.recent_peak.peak());
        let grown = match self.ladder.grow(backend, padded, size) {
            Err(AllocError::OutOfMemory) => {
                tracing::debug!(target: "gpuworld::memory", size, "device refused a page: cleaning up and retrying once");
                self.cleanup(backend);
                self.ladder.grow(backend, padded, size)
            }
            grown => grown,
        };
        // Pages the room made and the growth did not map again go back now.
        backend.trim_pages();
        self.account_growth(grown, size)?
            .ok_or_else(|| self.out_of_memory(size))
    }

    /// Places a request by moving live slices (`Compacts::compact`), their records following; where
    /// no page can make room for it, empties pages that can go back to the device
    /// (`Compacts::evacuate`) instead: the request's block, or the bytes of pages retiring.
    pub(super) fn compact(
        &mut self,
        padded: u64,
        size: u64,
        compaction: Compaction<'_>,
        copies: &mut bool,
    ) -> (Option<Block>, u64) {
        // The ladder's live slices by place, with what each allows (parked ones stay), gathered
        // only if the pools look at a block.
        let needed = self.over_budget(padded);
        let stream = compaction.stream;
        let (slices, ladder) = (&self.slices, &mut self.ladder);
        let mut by_place: Option<FxHashMap<Place, (SliceKey, Movable)>> = None;
        let mut place = |from: &Block| {
            let places = by_place.get_or_insert_with(|| {
                (slices.iter())
                    .filter(|(_, record)| {
                        record.pool == PoolIndex::Ladder
                            && (record.parked_on.is_none() || record.parked_on == stream)
                    })
                    .map(|(key, record)| {
                        let block = record.block;
                        let movable = match record.parked_on {
                            Some(_) => Movable::Reusable,
                            None => (compaction.movable)(key),
                        };
                        ((block.pool, block.page, block.offset), (key, movable))
                    })
                    .collect()
            });
            places.get(&(from.pool, from.page, from.offset)).copied()
        };
        let mut blocks = Vec::new();
        let block = {
            let mut movable =
                |block: &Block| place(block).map_or(Movable::No, |(_, movable)| movable);
            let block = ladder.compact(padded, size, &mut movable, &mut blocks);
            match block {
                // Pages emptied before still go back: the request waits for them rather than
                // empty more.
                None if self.evacuates && ladder.retiring() > 0 => (None, ladder.retiring()),
                None if self.evacuates => {
                    let retiring = ladder.evacuate(needed, &mut movable, &mut blocks);
                    (None, retiring)
                }
                block => (block, 0),
            }
        };
        let (block, retiring) = block;
        // A block may move more than once in one compaction (into a run's room, then out of a
        // run cleared after it): its later moves start where an earlier one put it, which only
        // the moves so far know.
        let mut moved_to: FxHashMap<Place, (SliceKey, Movable)> = FxHashMap::default();
        let moved: Vec<MovedBlock> = blocks
            .into_iter()
            .map(|(from, to)| {
                let held = moved_to
                    .remove(&(from.pool, from.page, from.offset))
                    .or_else(|| place(&from));
                if let Some(held) = held {
                    moved_to.insert((to.pool, to.page, to.offset), held);
                }
                (from, to, held)
            })
            .collect();
        // Memory parked for the stream that the request's block took: its slices end here (the
        // GC stage finds their keys dead, as when the stream takes parked memory).
        let reused: Vec<SliceKey> = match (block, &by_place) {
            (Some(block), Some(places)) => (places.values())
                .filter(|(_, movable)| *movable == Movable::Reusable)
                .filter_map(|&(key, _)| {
                    let record = self.slices.get(key)?;
                    let inside = record.block.pool == block.pool
                        && record.block.page == block.page
                        && record.block.offset >= block.offset
                        && record.block.offset < block.offset + block.len;
                    inside.then_some(key)
                })
                .collect(),
            _ => Vec::new(),
        };
        for key in reused {
            if let (Some(record), Some(stream)) = (self.slices.remove(key), stream) {
                self.parked.remove(stream, record.pool, &record.block, key);
                debug_assert_eq!(record.parked_on, Some(stream));
            }
            *copies = true;
        }
        *copies |= self.record_moves(moved, compaction.moves);
        (block, retiring)
    }

    /// Points each slice a compaction moved at its new block and reports the move in `moves`;
    /// whether any moved bytes must be copied.
    pub(super) fn record_moves(&mut self, moved: Vec<MovedBlock>, moves: &mut Vec<Moved>) -> bool {
        let mut copies = false;
        for (from, to, place) in moved {
            let Some((slice, movable)) = place else {
                tracing::error!(target: "gpuworld::memory", ?from, "a compaction moved a block no slice holds");
                continue;
            };
            if let Some(record) = self.slices.get_mut(slice) {
                record.block = to;
            }
            // A block moved into room cleared for it may be longer (it covers old places copies
            // still read): the difference is padding until the slice goes.
            self.usage.bytes_padding = self.usage.bytes_padding + to.len - from.len;
            let copied = movable == Movable::Copied;
            copies |= copied;
            moves.push(Moved {
                slice,
                from: Region {
                    storage: from.storage,
                    offset: from.offset,
                    size: from.len,
                },
                to: Region {
                    storage: to.storage,
                    offset: to.offset,
                    size: to.len,
                },
                copied,
            });
        }
        copies
    }
}

//! The memory pool's parking methods (the books they keep are `parked.rs`'s): parking, joining,
//! sealing a tick's group, taking parked memory for the stream's allocations, and returning a
//! group once the lifetime released its last handle.

use super::*;

impl MemoryPool {
    /// The parked block `stream` would take for `padded` bytes: the shortest that holds them
    /// and that its pool splits, or one at most a fifth longer (taken whole).
    pub(super) fn parked_fit(&self, stream: Entity, padded: u64) -> Option<SliceKey> {
        let fit = largest_fit(padded);
        let splits = |key: SliceKey| {
            self.slices.get(key).is_some_and(|record| {
                self.pool(record.pool, &record.block)
                    .is_some_and(|pool| pool.splits(&record.block))
            })
        };
        (self.parked.fitting(stream, padded).take(PARKED_TRIED))
            .find(|&(len, key)| len <= fit || splits(key))
            .map(|(_, key)| key)
    }

    /// Memory `stream` parked for `size` bytes ([`MemoryPool::parked_fit`]), under a new key (a
    /// released key stays dead). Of a block its pool splits, the request takes only its padded
    /// size and the rest stays parked. The stream orders its own work, so any part of its
    /// memory is free to it.
    pub(super) fn take_parked(&mut self, stream: Entity, size: u64) -> Option<Reservation> {
        let padded = self.padded(size)?;
        let old = self.parked_fit(stream, padded)?;
        let mut record = self.slices.remove(old)?;
        self.parked.remove(stream, record.pool, &record.block, old);
        if record.block.len > padded
            && let Some(rest) = (self.pool_mut(record.pool, &record.block).ok())
                .and_then(|pool| pool.split(&record.block, padded))
        {
            record.block.len = padded;
            let key = self.slices.insert(SliceRecord {
                pool: record.pool,
                block: rest,
                requested: 0,
                parked_on: Some(stream),
                group: record.group,
            });
            self.parked.park(stream, record.pool, &rest, key);
        }
        if let Ok(pool) = self.pool_mut(record.pool, &record.block) {
            pool.report_mut().resized(record.requested, size);
        }
        let block = record.block;
        let slice = self.slices.insert(SliceRecord {
            pool: record.pool,
            block,
            requested: size,
            parked_on: None,
            group: None,
        });
        self.count_reserved(size, block.len);
        Some(Reservation {
            slice,
            region: Region {
                storage: block.storage,
                offset: block.offset,
                size,
            },
            parked_by_stream: true,
        })
    }

    /// Parks a released slice whose every use was on `stream`: that stream's later allocations
    /// may take it at once; it returns to its pool by [`MemoryPool::release_parked`] once the
    /// device is proven done with it. It no longer counts as in use.
    ///
    /// Slices the stream parked since the last [`MemoryPool::seal_parking`] form one group: a
    /// slice joins its parked neighbours of the group in its page, and the group's memory
    /// returns to its pool once [`MemoryPool::release_parked`] was called for each of them.
    pub fn park(&mut self, key: SliceKey, stream: Entity) -> Result<(), MemoryError> {
        if self
            .slices
            .get(key)
            .is_none_or(|record| record.parked_on.is_some())
        {
            return Err(stale_slice(key));
        }
        let group = self.open_group(stream);
        let Some(record) = self.slices.get_mut(key) else {
            return Err(stale_slice(key));
        };
        record.parked_on = Some(stream);
        record.group = Some(group);
        let (requested, len) = (record.requested, record.block.len);
        if let Some(entry) = self.groups.get_mut(group) {
            entry.pending += 1;
            entry.handles += 1;
        }
        self.owed.insert(key, group);
        self.parked_open += len;
        self.count_released(requested, len);
        let joined = self.join_parked(key, stream, group);
        if let Some(record) = self.slices.get(joined) {
            let (pool, block) = (record.pool, record.block);
            self.parked.park(stream, pool, &block, joined);
        }
        Ok(())
    }

    /// The group `stream` parks in now.
    pub(super) fn open_group(&mut self, stream: Entity) -> GroupKey {
        if let Some(&(_, group)) = self.open_groups.iter().find(|(s, _)| *s == stream) {
            return group;
        }
        let group = self.groups.insert(ParkGroup {
            stream,
            pending: 0,
            handles: 0,
            awaited: false,
        });
        self.open_groups.push((stream, group));
        group
    }

    /// Joins `key`, being parked, with the blocks of its group parked right before and after it
    /// in its page, where its pool joins blocks; the key of the block it ends in.
    pub(super) fn join_parked(
        &mut self,
        key: SliceKey,
        stream: Entity,
        group: GroupKey,
    ) -> SliceKey {
        let Some(record) = self.slices.get(key) else {
            return key;
        };
        let pool = record.pool;
        // Joining the block before leaves the end where it was: both neighbours are found once.
        let (before, after) = self.parked.neighbours(stream, pool, &record.block);
        let mut key = key;
        for (neighbour, neighbour_first) in [(before, true), (after, false)] {
            let (Some(other), Some(block)) = (neighbour, self.slices.get(key).map(|r| r.block))
            else {
                continue;
            };
            let Some(other_record) = (self.slices.get(other))
                .filter(|other| other.group == Some(group) && other.pool == pool)
            else {
                continue;
            };
            let (other_block, other_requested) = (other_record.block, other_record.requested);
            let (first, second) = match neighbour_first {
                true => (other_block, block),
                false => (block, other_block),
            };
            // Blocks of two pools of the ladder never join, though their pages' keys may match.
            let joined = match self.pool_mut(pool, &first) {
                Ok(placed) if first.pool == second.pool => placed.join(&first, &second),
                _ => None,
            };
            let Some(joined) = joined else {
                continue;
            };
            self.parked.remove(stream, pool, &other_block, other);
            self.slices.remove(other);
            let Some(record) = self.slices.remove(key) else {
                return key;
            };
            key = self.slices.insert(SliceRecord {
                pool,
                block: joined,
                requested: record.requested + other_requested,
                parked_on: Some(stream),
                group: Some(group),
            });
        }
        key
    }

    /// Closes every stream's parking group: slices parked from now on join only each other. The
    /// GC stage calls it once a tick, after pinning released memory behind events, so that a
    /// group's handles are released together.
    pub fn seal_parking(&mut self) {
        self.open_groups.clear();
        self.parked_open = 0;
    }

    /// Whether the streams parked as much since [`MemoryPool::seal_parking`] as a tick should: a
    /// 32nd of the recent peak in use, at least 1 MiB. Parked memory goes back to its pool only
    /// behind the events of the tick that parked it, so a tick that ingests thousands of
    /// commands would hold everything they freed at once: ingest leaves the rest of its commands
    /// to the next tick instead, and reserved memory then follows what is live, not how many
    /// commands a tick takes.
    pub fn parking_full(&self) -> bool {
        self.parked_open > (self.recent_peak.peak() / 32).max(1 << 20)
    }

    /// Whether a request of `size` bytes by `stream` (whose entity is `entity`) should wait for
    /// parked memory to come back rather than take the pools past their budget: no free memory
    /// and no memory the stream parked holds it, while at least as much is parked, behind events
    /// the GC stage will see pass. Ingest then leaves the request (and what follows it) to a
    /// later tick, `PARKED_WAITS` ticks at most, so that the device, not the rate of ticks,
    /// decides what is reserved: the memory returns as soon as the device is done with it.
    pub fn waits_for_parked(&mut self, size: u64, stream: StreamId, entity: Entity) -> bool {
        // Ingest asks for every allocation: what rules most of them out comes first.
        let waits = self.padded(size).is_some_and(|padded| {
            self.parked.bytes() >= padded
                && padded >= self.worth_waiting_for()
                && self.parked_waits < PARKED_WAITS
                && self
                    .parked_wait_since
                    .is_none_or(|since| since.elapsed() < PARKED_WAIT)
                && self.modes.current(stream) == AllocationMode::Auto
                && self.over_budget(padded) > 0
                && !self.can_place(padded)
                && self.parked_fit(entity, padded).is_none()
        });
        if waits {
            self.parked_waits += 1;
            self.parked_wait_since
                .get_or_insert_with(std::time::Instant::now);
        } else {
            self.parked_waits = 0;
            self.parked_wait_since = None;
        }
        waits
    }

    /// The smallest request that waits for parked memory: a 64th of the recent peak in use, at
    /// least 1 MiB. A smaller one grows the pools by little, and waiting would hold up the
    /// commands behind it for nothing.
    pub(super) fn worth_waiting_for(&self) -> u64 {
        (self.recent_peak.peak() / 64).max(1 << 20)
    }

    /// Counts a parked handle (`key`) released by the GC stage, whose memory a cleanup waits for
    /// if `awaited`: once every handle of its group was, the group's memory returns to its pool.
    pub fn release_parked(
        &mut self,
        key: SliceKey,
        awaited: bool,
    ) -> Result<ParkedReturn, MemoryError> {
        let Some(group) = self.owed.remove(&key) else {
            return match self.slices.get(key) {
                Some(record) if record.parked_on.is_none() => Err(MemoryError::StaleHandle {
                    what: format!("memory slice {key:?} (live, not parked)").into(),
                }),
                _ => Err(stale_slice(key)),
            };
        };
        let Some(entry) = self.groups.get_mut(group) else {
            return Err(stale_slice(key));
        };
        entry.pending = entry.pending.saturating_sub(1);
        entry.awaited |= awaited;
        if entry.pending > 0 {
            return Ok(ParkedReturn::default());
        }
        let Some(ParkGroup {
            stream,
            handles,
            awaited,
            ..
        }) = self.groups.remove(group)
        else {
            return Err(stale_slice(key));
        };
        self.open_groups.retain(|&(_, open)| open != group);
        let members: Vec<SliceKey> = (self.parked.of_stream(stream))
            .filter(|&member| {
                self.slices
                    .get(member)
                    .is_some_and(|record| record.group == Some(group))
            })
            .collect();
        if members.is_empty() {
            return Ok(ParkedReturn::default());
        }
        for member in members {
            self.release(member)?;
        }
        Ok(ParkedReturn { handles, awaited })
    }

    /// Slices parked by their streams, and their bytes (padding included).
    pub fn parked(&self) -> (usize, u64) {
        (self.parked.len(), self.parked.bytes())
    }
}

//! How the compacting pool frees room by moving live blocks: the runs of a page that would hold
//! a request (free ranges and movable blocks, address order), the cheapest of them cleared by
//! moving their blocks to best-fit free ranges (or into room one more run makes), and whole
//! pages emptied to retire.

use super::CompactingPool;
use crate::memory::pool::Movable;
use crate::memory::{Block, PageKey};

/// How deep a compaction looks for room for a block it moves that fits no free range: one run
/// cleared for it, whose blocks must fit free ranges.
const NESTED_DEPTH: u32 = 1;
/// Runs tried for such a block, fewest bytes moved first.
const NESTED_RUNS_TRIED: usize = 4;
/// Runs tried for a request, fewest bytes moved first: each failed try restores the pool's
/// pages.
const RUNS_TRIED: usize = 32;

/// One item of a page in address order: a free range or a live block.
#[derive(Clone, Copy, Debug)]
struct Item {
    offset: u64,
    len: u64,
    /// `None` for a free range.
    live: Option<Movable>,
}

/// Whether a run moves an item's bytes: a live block other than memory the stream reuses.
fn is_moved(live: Option<Movable>) -> bool {
    matches!(live, Some(Movable::Unwritten | Movable::Copied))
}

/// Keeps the `count` runs that move the fewest bytes for a block of `len` (bytes idle in the
/// block's place count as moved), cheapest first.
fn cheapest(runs: &mut Vec<Run>, len: u64, count: usize) {
    let cost = |run: &Run| (run.moved + run.waste(len), run.end - run.start);
    if runs.len() > count {
        runs.select_nth_unstable_by_key(count, cost);
        runs.truncate(count);
    }
    runs.sort_unstable_by_key(cost);
}

/// Whether an attempt for `bytes` already failed with the pool as it is: one for as many bytes
/// or fewer failed, and nothing that could make room happened since.
fn failed_before(failed: Option<(u64, u64)>, changes: u64, bytes: u64) -> bool {
    failed.is_some_and(|(at, smallest)| at == changes && bytes >= smallest)
}

/// A run of items one compaction would clear for a request.
#[derive(Clone, Debug)]
struct Run {
    page: PageKey,
    /// Its items' range in the page.
    start: u64,
    end: u64,
    /// Bytes of live blocks to move.
    moved: u64,
    /// The old places of blocks whose bytes are copied, first to last byte: the copies still
    /// read them, so the request's block must cover them.
    copied: Option<(u64, u64)>,
}

impl Run {
    /// The request's block in the run: `padded` bytes, or the copied blocks' span if longer,
    /// covering that span and placed as late as the run allows (free ranges and unwritten
    /// blocks around it are free again).
    fn placement(&self, padded: u64) -> (u64, u64) {
        match self.copied {
            None => (self.start, self.start + padded),
            Some((first, last)) => {
                let len = padded.max(last - first);
                let at = first.min(self.end - len).max(self.start);
                (at, at + len)
            }
        }
    }

    /// Bytes of the request's block past `padded`: idle until the request is released.
    fn waste(&self, padded: u64) -> u64 {
        let (start, end) = self.placement(padded);
        end - start - padded
    }
}

impl CompactingPool {
    /// The runs of one page that clear `padded` bytes: for each first item, the fewest items
    /// from it on whose bytes reach `padded`, none of them an immovable block.
    fn runs(
        &self,
        key: PageKey,
        padded: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        out: &mut Vec<Run>,
    ) {
        let Some(page) = self.pages.get(key) else {
            return;
        };
        if page.size < padded || page.dedicated || page.retiring {
            return;
        }
        let mut items: Vec<Item> = Vec::with_capacity(page.live.len() + page.free.len());
        let mut free = page.free.iter().peekable();
        for (&offset, &len) in &page.live {
            while let Some((&at, &range)) = free.next_if(|(at, _)| **at < offset) {
                items.push(Item {
                    offset: at,
                    len: range,
                    live: None,
                });
            }
            let block = Block {
                page: key,
                storage: page.storage,
                offset,
                len,
                pool: 0,
            };
            items.push(Item {
                offset,
                len,
                live: Some(movable(&block)),
            });
        }
        for (&at, &range) in free {
            items.push(Item {
                offset: at,
                len: range,
                live: None,
            });
        }
        // Two pointers over the items: `first..last` the current run.
        let (mut first, mut bytes, mut moved) = (0, 0u64, 0u64);
        for last in 0..items.len() {
            let item = items[last];
            if item.live == Some(Movable::No) {
                (first, bytes, moved) = (last + 1, 0, 0);
                continue;
            }
            bytes += item.len;
            moved += if is_moved(item.live) { item.len } else { 0 };
            // Drop items from the front while the run still clears the request without them.
            while first < last && bytes - items[first].len >= padded {
                bytes -= items[first].len;
                if is_moved(items[first].live) {
                    moved -= items[first].len;
                }
                first += 1;
            }
            let reused = items[first..=last]
                .iter()
                .any(|item| item.live == Some(Movable::Reusable));
            if bytes >= padded && (moved > 0 || reused) {
                // The request's block covers what copies still read and what it reuses.
                let copied = items[first..=last]
                    .iter()
                    .filter(|item| matches!(item.live, Some(Movable::Copied | Movable::Reusable)))
                    .fold(None, |span: Option<(u64, u64)>, item| {
                        let (start, end) = (item.offset, item.offset + item.len);
                        Some(span.map_or((start, end), |(a, b)| (a.min(start), b.max(end))))
                    });
                out.push(Run {
                    page: key,
                    start: items[first].offset,
                    end: item.offset + item.len,
                    moved,
                    copied,
                });
            }
        }
    }

    /// Clears `run` by moving its live blocks elsewhere (largest first, best fit outside the
    /// run and the regions in `avoid`; with `depth` left, into room another run makes for a block
    /// no free range fits). `false` when one finds no room: the caller restores the pool.
    fn clear(
        &mut self,
        run: &Run,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
        depth: u32,
        avoid: &mut Vec<(PageKey, u64, u64)>,
    ) -> bool {
        let Some(page) = self.pages.get(run.page) else {
            return false;
        };
        let storage = page.storage;
        let mut blocks: Vec<(u64, u64)> = page
            .live
            .range(run.start..run.end)
            .map(|(&offset, &len)| (offset, len))
            .collect();
        // Memory the stream reuses stays where it is: the request's block covers it.
        blocks.retain(|&(offset, len)| {
            let block = Block {
                page: run.page,
                storage,
                offset,
                len,
                pool: 0,
            };
            movable(&block) != Movable::Reusable
        });
        blocks.sort_unstable_by_key(|&(offset, len)| (std::cmp::Reverse(len), offset));
        avoid.push((run.page, run.start, run.end));
        for (offset, len) in blocks {
            let to = match self.best_fit(len, avoid) {
                Some((to_page, at)) => {
                    // The request owns the run next, so the block's old place is not freed here.
                    self.carve(to_page, at, at, len);
                    self.block(to_page, at, len)
                }
                None if depth > 0 => self.room_for(len, movable, moves, depth - 1, avoid),
                None => None,
            };
            let (Some(from), Some(to)) = (self.block(run.page, offset, len), to) else {
                return false;
            };
            moves.push((from, to));
        }
        true
    }

    /// Makes room for a moved block of `len` bytes by clearing another run (see `clear`); its
    /// block there, longer than `len` where it must cover the old places of blocks copied out.
    fn room_for(
        &mut self,
        len: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
        depth: u32,
        avoid: &mut Vec<(PageKey, u64, u64)>,
    ) -> Option<Block> {
        // Only the request's own block takes memory its stream reuses: a moved block's new place
        // holds none (the parked slice would outlive it in the pool's records).
        let mut movable = |block: &Block| match movable(block) {
            Movable::Reusable => Movable::No,
            other => other,
        };
        let movable: &mut dyn FnMut(&Block) -> Movable = &mut movable;
        let mut runs = Vec::new();
        let keys: Vec<PageKey> = self.pages.keys().collect();
        for key in keys {
            self.runs(key, len, movable, &mut runs);
        }
        runs.retain(|run| {
            !avoid
                .iter()
                .any(|&(page, start, end)| page == run.page && run.start < end && start < run.end)
        });
        cheapest(&mut runs, len, NESTED_RUNS_TRIED);
        for run in runs {
            self.begin();
            let (mark, avoided) = (moves.len(), avoid.len());
            if self.clear(&run, movable, moves, depth, avoid) {
                let (start, end) = self.settle(&run, len);
                self.commit();
                return self.block(run.page, start, end - start);
            }
            self.rollback();
            moves.truncate(mark);
            avoid.truncate(avoided);
        }
        None
    }

    /// Gives a cleared run to a block of `len` bytes: its moved blocks' old places and free
    /// ranges become the block's place (`Run::placement`), and the rest is free again.
    fn settle(&mut self, run: &Run, len: u64) -> (u64, u64) {
        let (start, end) = run.placement(len);
        self.touch(run.page);
        let Some(page) = self.pages.get_mut(run.page) else {
            return (start, end);
        };
        // Left in the run: the old places of the blocks moved out, and memory the stream
        // reuses; all of it is the block's now.
        let inside: Vec<u64> = page
            .live
            .range(run.start..run.end)
            .map(|(&o, _)| o)
            .collect();
        for offset in inside {
            page.live.remove(&offset);
        }
        let free: Vec<(u64, u64)> = (page.free.range(run.start..run.end))
            .map(|(&at, &len)| (at, len))
            .collect();
        for (at, len) in free {
            page.free.remove(&at);
            self.free.remove(&(len, run.page, at));
        }
        if let Some(page) = self.pages.get_mut(run.page) {
            page.live.insert(start, end - start);
            page.idle.reused();
        }
        if start > run.start {
            self.free_range(run.page, run.start, start - run.start);
        }
        if end < run.end {
            self.free_range(run.page, end, run.end - end);
        }
        (start, end)
    }

    /// Pages with the fewest live bytes first, each only if every block moves to free ranges of
    /// pages that stay; the emptied pages retire.
    pub(super) fn evacuate_pages(
        &mut self,
        needed: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> u64 {
        if failed_before(self.failed_evacuation, self.changes, needed) {
            return 0;
        }
        self.evacuations += 1;
        let generation = self.evacuations;
        let mut pages: Vec<(u64, PageKey)> = (self.pages.iter())
            .filter(|(_, page)| !page.retiring && !page.dedicated && !page.live.is_empty())
            .map(|(key, page)| (page.live.values().sum::<u64>(), key))
            .collect();
        pages.sort_unstable();
        let mut retired = 0;
        for (_, key) in pages {
            if retired >= needed {
                break;
            }
            let Some(page) = self.pages.get(key) else {
                continue;
            };
            let (storage, size) = (page.storage, page.size);
            let blocks: Vec<(u64, u64)> = page.live.iter().map(|(&o, &l)| (o, l)).collect();
            // A page goes back only if every block moves out of it.
            let all_movable = blocks.iter().all(|&(offset, len)| {
                let block = Block {
                    page: key,
                    storage,
                    offset,
                    len,
                    pool: 0,
                };
                is_moved(Some(movable(&block)))
            });
            if !all_movable {
                continue;
            }
            // The page's free ranges leave the index first: nothing moves into it.
            if let Some(page) = self.pages.get_mut(key) {
                page.retiring = true;
                page.retired_in = generation;
                for (&offset, &len) in &page.free {
                    self.free.remove(&(len, key, offset));
                }
            }
            let run = Run {
                page: key,
                start: 0,
                end: size,
                moved: 0,
                copied: None,
            };
            let mark = moves.len();
            self.begin();
            if !self.clear(&run, movable, moves, NESTED_DEPTH, &mut Vec::new()) {
                self.rollback();
                moves.truncate(mark);
                if let Some(page) = self.pages.get_mut(key) {
                    page.retiring = false;
                    for (&offset, &len) in &page.free {
                        self.free.insert((len, key, offset));
                    }
                }
                continue;
            }
            self.commit();
            if let Some(page) = self.pages.get_mut(key) {
                page.live.clear();
                page.free.clear();
            }
            let moved: u64 = moves[mark..].iter().map(|(from, _)| from.len).sum();
            self.report.bytes_moved += moved;
            self.report.blocks_moved += (moves.len() - mark) as u64;
            retired += size;
            tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, size, moved, "emptied a page to return it");
        }
        if retired == 0 {
            self.failed_evacuation = Some((self.changes, needed));
        }
        retired
    }

    /// The run of one page that clears `padded` bytes for the fewest bytes moved (of the
    /// cheapest few whose blocks all find room elsewhere); the request's block spans the run up
    /// to the end of its last copied block, and the rest of the run is free again.
    pub(super) fn compact_for(
        &mut self,
        padded: u64,
        requested: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> Option<Block> {
        if failed_before(self.failed_compaction, self.changes, padded) {
            return None;
        }
        let mut runs = Vec::new();
        let keys: Vec<PageKey> = self.pages.keys().collect();
        for key in keys {
            self.runs(key, padded, movable, &mut runs);
        }
        // Bytes moved and bytes idle in the request's block weigh alike.
        cheapest(&mut runs, padded, RUNS_TRIED);
        for run in runs {
            self.begin();
            let mark = moves.len();
            let mut avoid = Vec::new();
            if !self.clear(&run, movable, moves, NESTED_DEPTH, &mut avoid) {
                self.rollback();
                moves.truncate(mark);
                continue;
            }
            let (start, end) = self.settle(&run, padded);
            self.commit();
            let moved: u64 = moves[mark..].iter().map(|(from, _)| from.len).sum();
            self.report.bytes_moved += moved;
            self.report.blocks_moved += (moves.len() - mark) as u64;
            self.report.reserved(requested);
            tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, padded, moved, blocks = moves.len() - mark, "compacted a page for a request");
            return self.block(run.page, start, end - start);
        }
        self.failed_compaction = Some((self.changes, padded));
        None
    }
}

//! The compacting pool's own tests: merging, best fit, compaction, retiring, dedicated pages.

use super::*;
use crate::sim::{SimBackend, SimConfig};

const MIB: u64 = 1 << 20;

fn device() -> SimBackend {
    SimBackend::new(
        SimConfig::default()
            .with_memory_bytes(1 << 30)
            .with_record(false),
    )
}

/// A pool of 8 MiB pages holding eight 1 MiB blocks, with the blocks at 1, 3 and 5 MiB
/// released: three holes of 1 MiB, no room for 2 MiB.
fn holed(device: &mut SimBackend) -> (CompactingPool, Vec<Block>) {
    let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
    let first = pool.grow(device, MIB, MIB).unwrap().unwrap();
    let mut blocks = vec![first];
    for _ in 1..8 {
        blocks.push(pool.try_reserve(MIB, MIB).unwrap());
    }
    assert!(pool.try_reserve(MIB, MIB).is_none(), "the page is full");
    for index in [1, 3, 5] {
        pool.release(&blocks[index], MIB).unwrap();
    }
    (pool, blocks)
}

#[test]
fn released_blocks_merge_and_best_fit_takes_the_smallest_hole() {
    let mut device = device();
    let (mut pool, blocks) = holed(&mut device);
    pool.release(&blocks[2], MIB).unwrap();
    // 1..4 MiB is one range now; a 1 MiB request takes the smallest hole (5 MiB).
    let block = pool.try_reserve(MIB, MIB).unwrap();
    assert_eq!(block.offset, 5 * MIB);
    let block = pool.try_reserve(3 * MIB, 3 * MIB).unwrap();
    assert_eq!((block.offset, block.len), (MIB, 3 * MIB));
    assert_eq!(pool.report().pages_allocated, 1);
}

#[test]
fn a_compaction_moves_the_fewest_bytes_and_places_the_request_where_they_were() {
    let mut device = device();
    let (mut pool, blocks) = holed(&mut device);
    assert!(!pool.can_place(2 * MIB));
    let mut moves = Vec::new();
    let block = pool
        .compact(2 * MIB, 2 * MIB, &mut |_| Movable::Copied, &mut moves)
        .expect("one moved block makes room");
    assert_eq!(moves.len(), 1, "one 1 MiB block moves: {moves:?}");
    let (from, to) = moves[0];
    assert_eq!(from.len, MIB);
    assert!(
        blocks.iter().any(|b| b.offset == from.offset),
        "a live block moved"
    );
    assert!(
        [MIB, 3 * MIB, 5 * MIB].contains(&to.offset),
        "into a hole: {to:?}"
    );
    // The request covers the moved block's old place (its copy still reads it).
    assert_eq!(block.len, 2 * MIB);
    assert!(block.offset <= from.offset && from.offset + MIB <= block.offset + block.len);
    assert_eq!(pool.report().pages_allocated, 1, "no new page");
    assert_eq!(pool.report().bytes_moved, MIB);
}

#[test]
fn blocks_that_may_not_move_stay_and_the_compaction_gives_up() {
    let mut device = device();
    let (mut pool, _) = holed(&mut device);
    let mut moves = Vec::new();
    let placed = pool.compact(2 * MIB, 2 * MIB, &mut |_| Movable::No, &mut moves);
    assert!(placed.is_none());
    assert!(moves.is_empty());
    // Nothing changed: the three holes still serve 1 MiB requests.
    for _ in 0..3 {
        assert!(pool.try_reserve(MIB, MIB).is_some());
    }
}

#[test]
fn a_block_no_hole_fits_moves_into_room_another_run_makes() {
    let mut device = device();
    let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
    // Page A: 2 MiB block at 0, 2 MiB block at 2, 1 MiB hole, 1 MiB block, 2 MiB hole.
    let a0 = pool.grow(&mut device, 2 * MIB, 2 * MIB).unwrap().unwrap();
    let a1 = pool.try_reserve(2 * MIB, 2 * MIB).unwrap();
    let hole = pool.try_reserve(MIB, MIB).unwrap();
    let _a3 = pool.try_reserve(MIB, MIB).unwrap();
    let tail = pool.try_reserve(2 * MIB, 2 * MIB).unwrap();
    pool.release(&hole, MIB).unwrap();
    pool.release(&tail, 2 * MIB).unwrap();
    assert_eq!((a0.offset, a1.offset), (0, 2 * MIB));
    // 3 MiB fits nowhere; the cheapest run is the 1 MiB block and the 2 MiB hole.
    let mut moves = Vec::new();
    let block = pool
        .compact(3 * MIB, 3 * MIB, &mut |_| Movable::Unwritten, &mut moves)
        .expect("room");
    assert_eq!(moves.len(), 1);
    assert_eq!((block.offset, block.len), (5 * MIB, 3 * MIB));
    assert_eq!(
        moves[0].1.offset,
        4 * MIB,
        "the block went to the 1 MiB hole"
    );
}

#[test]
fn an_emptied_page_retires_and_goes_back_only_when_told() {
    let mut device = device();
    let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
    let a = pool.grow(&mut device, 6 * MIB, 6 * MIB).unwrap().unwrap();
    // A second page holding one 1 MiB block.
    let c = pool.grow(&mut device, MIB, MIB).unwrap().unwrap();
    assert_ne!(c.page, a.page);
    // The page with the 1 MiB block empties into the first page's free 2 MiB.
    let mut moves = Vec::new();
    let retired = pool.evacuate(MIB, &mut |_| Movable::Copied, &mut moves);
    assert_eq!(retired, 8 * MIB);
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].1.page, a.page);
    assert_eq!(pool.retiring(), 8 * MIB);
    assert_eq!(
        pool.report().pages,
        2,
        "still held until the copies were submitted"
    );
    assert!(
        !pool.can_place(2 * MIB),
        "nothing is placed in a retiring page"
    );
    assert!(pool.can_place(MIB));
    assert_eq!(pool.retiring_generation(), 1);
    assert_eq!(
        pool.release_retiring(&mut device, 0),
        0,
        "retired by evacuation 1"
    );
    assert_eq!(pool.release_retiring(&mut device, 1), 8 * MIB);
    assert_eq!(pool.report().pages, 1);
    assert_eq!(pool.retiring(), 0);
}

#[test]
fn a_request_over_the_page_gets_a_page_of_its_own_reused_whole() {
    let mut device = device();
    let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
    let own = pool.grow(&mut device, 16 * MIB, 16 * MIB).unwrap().unwrap();
    assert_eq!((own.offset, own.len), (0, 16 * MIB));
    pool.release(&own, 16 * MIB).unwrap();
    assert!(
        pool.try_reserve(MIB, MIB).is_none(),
        "small requests share pages"
    );
    // Within an eighth of it, a later request takes it whole.
    let again = pool.try_reserve(15 * MIB, 15 * MIB).unwrap();
    assert_eq!((again.page, again.len), (own.page, 16 * MIB));
    pool.release(&again, 15 * MIB).unwrap();
    assert!(
        pool.try_reserve(12 * MIB, 12 * MIB).is_none(),
        "wasting a quarter"
    );
    assert_eq!(pool.release_idle(&mut device, 1), 16 * MIB);
}

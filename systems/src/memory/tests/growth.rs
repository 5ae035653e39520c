//! Growth: shared pages from the first to the full size, capped pools, the ladder's report as
//! the sum of its pools', and caches that keep room to grow.

use super::*;

#[test]
fn shared_pages_grow_from_the_first_page_to_the_full_size() {
    let mut backend = device(1 << 32);
    let mut config = sliced(64 * MIB, 16 * MIB, u64::MAX);
    config.kind = PoolKind::Sliced {
        page_size: 64 * MIB,
        max_slice: 16 * MIB,
        first_page: MIB,
    };
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![config]),
    );
    // Two live 1 MiB buffers hold 2 MiB, not a 64 MiB page.
    let a = pool.reserve(&mut backend, MIB, AUTO).unwrap();
    let b = pool.reserve(&mut backend, MIB, AUTO).unwrap();
    assert_eq!(pool.usage().bytes_reserved, 2 * MIB);
    // Each new page is a 32nd of those held and at least twice the request: what a new page
    // leaves empty is never a large part of what the pool holds.
    let mut keys = vec![a.slice, b.slice];
    for _ in 0..2000 {
        keys.push(pool.reserve(&mut backend, MIB, AUTO).unwrap().slice);
        let reserved = pool.usage().bytes_reserved;
        let in_use = keys.len() as u64 * MIB;
        assert!(
            reserved - in_use <= (2 * MIB).max(reserved / 32),
            "{reserved} for {in_use}"
        );
    }
    let pages = pool.reports()[0].pages;
    assert!((100..=160).contains(&pages), "{:?}", pool.reports()[0]);
    // Past 32 full pages' worth, new pages are full pages: 1 GiB more takes about 16.
    for _ in 0..1024 {
        keys.push(pool.reserve(&mut backend, MIB, AUTO).unwrap().slice);
    }
    let added = pool.reports()[0].pages - pages;
    assert!((16..=18).contains(&added), "{added} pages for 1 GiB");
    // A request larger than the next page gets a page its size.
    let big = pool.reserve(&mut backend, 12 * MIB, AUTO).unwrap();
    assert_eq!(big.region.size, 12 * MIB);
    for key in keys {
        pool.release(key).unwrap();
    }
}

#[test]
fn a_sliced_pool_capped_below_its_page_size_serves_up_to_its_cap() {
    let mut backend = device(1 << 24);
    let mut capped = sliced(64 * KIB, 64 * KIB, u64::MAX);
    capped.max_reserved = Some(10 * KIB);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![capped]),
    );
    let a = pool.reserve(&mut backend, 4 * KIB, AUTO).unwrap();
    let b = pool.reserve(&mut backend, 6 * KIB, AUTO).unwrap();
    assert!(
        pool.usage().bytes_reserved <= 10 * KIB,
        "{:?}",
        pool.usage()
    );
    let error = pool.reserve(&mut backend, KIB, AUTO).unwrap_err();
    assert!(matches!(error, MemoryError::OutOfMemory { .. }), "{error}");
    pool.release(a.slice).unwrap();
    let c = pool.reserve(&mut backend, 4 * KIB, AUTO).unwrap();
    assert_eq!(pool.locate(b.slice).unwrap(), b.region);
    pool.release(c.slice).unwrap();
}

/// The ladder's pools count what the memory reserves: after every reserve, release, cleanup and
/// idle release of a seeded mix of sizes over every pool of the default ladder, their reports
/// summed with the persistent pool's are the memory's usage, everything goes back at the end,
/// and each slice is found in the pool that placed it.
#[test]
fn the_ladders_pools_count_what_the_memory_reserves_through_a_mix_of_sizes() {
    let mut backend = device(1 << 34);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::default(),
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let check = |pool: &MemoryPool| {
        let report = ladder_report(pool);
        let pools: Vec<PoolReport> = pool.ladder.pools().map(|p| p.report().clone()).collect();
        assert_eq!(report.pages, pools.iter().map(|r| r.pages).sum::<usize>());
        assert_eq!(report.allocs, pools.iter().map(|r| r.allocs).sum::<u64>());
        assert_eq!(
            report.bytes_in_use,
            pools.iter().map(|r| r.bytes_in_use).sum::<u64>()
        );
        assert_eq!(
            report.bytes_reserved,
            pools.iter().map(|r| r.bytes_reserved).sum::<u64>()
        );
        assert_eq!(
            report.bytes_allocated,
            pools.iter().map(|r| r.bytes_allocated).sum::<u64>()
        );
        assert_eq!(
            report.largest_alloc,
            pools.iter().map(|r| r.largest_alloc).max().unwrap_or(0)
        );
        assert!(report.peak_pages >= report.pages);
        assert_eq!(
            pool.usage().bytes_reserved,
            report.bytes_reserved + pool.persistent.report().bytes_reserved
        );
    };
    let mut live = Vec::new();
    for step in 0..1_000 {
        if live.len() < 8 || next() % 3 != 0 {
            // Sizes from bytes to 16 MiB: every pool of the ladder takes some.
            let size = match next() % 8 {
                0 => 1 + next() % 256,
                _ => 1 + (1u64 << (next() % 25)) + next() % 4096,
            };
            let reservation = pool.reserve(&mut backend, size, AUTO).unwrap();
            assert_eq!(pool.locate(reservation.slice).unwrap(), reservation.region);
            live.push(reservation.slice);
        } else {
            let index = (next() as usize) % live.len();
            pool.release(live.swap_remove(index)).unwrap();
        }
        if step % 250 == 249 {
            pool.cleanup(&mut backend);
        }
        check(&pool);
    }
    for slice in live.drain(..) {
        pool.release(slice).unwrap();
    }
    pool.cleanup(&mut backend);
    check(&pool);
    assert_eq!(ladder_report(&pool).allocs, 0);
    assert_eq!(ladder_report(&pool).bytes_reserved, 0);
    assert!(ladder_report(&pool).peak_pages > 0);
    assert!(
        pool.ladder.pools().all(|p| p.report().largest_alloc > 0),
        "every pool of the ladder served a request"
    );
}

#[test]
fn a_roomy_cache_reuses_an_idle_buffer_a_tight_one_would_replace() {
    // A 64 MiB buffer of its own goes idle; 40 MiB would waste three eighths of it.
    let run = |cache: CachePolicy| {
        let mut backend = device(1 << 30);
        let mut pool = MemoryPool::new(
            &properties(256, MemoryLayout::Sliced),
            &MemoryConfig::default().with_cache(cache),
        );
        let big = pool.reserve(&mut backend, 64 * MIB, AUTO).unwrap();
        pool.release(big.slice).unwrap();
        let smaller = pool.reserve(&mut backend, 40 * MIB, AUTO).unwrap();
        let reused = smaller.region.storage == big.region.storage;
        pool.release(smaller.slice).unwrap();
        (reused, backend.allocated())
    };
    // The default wastes at most an eighth: a new buffer, and the idle one goes back within the
    // budget (a 512th over the recent peak of 64 MiB).
    assert_eq!(run(CachePolicy::TIGHT), (false, 40 * MIB));
    // Up to half: the idle buffer serves it, and the device is asked for nothing.
    assert_eq!(run(CachePolicy::ROOMY), (true, 64 * MIB));
    // Out of bounds is raised to the smallest allowed (a warning says so), not a panic.
    let raised = CachePolicy::TIGHT.with_slack_divisor(0).with_fit_divisor(1);
    assert_eq!(run(raised), (true, 64 * MIB));
}

#[test]
fn a_buffer_that_grows_while_its_last_size_is_parked_gets_room_to_grow() {
    let mut backend = device(1 << 30);
    // Requests over 1 MiB get pages of their own.
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * MIB, MIB, u64::MAX)]),
    );
    let (s, _) = stream_entities();
    let id = StreamId { value: 0 };
    let first = pool.reserve_for(&mut backend, 10 * MIB, id, s).unwrap();
    pool.park(first.slice, s).unwrap();
    // A little larger than the parked page: the next size of a growing buffer.
    let grown = 10 * MIB + 64 * KIB;
    let second = pool.reserve_for(&mut backend, grown, id, s).unwrap();
    assert_ne!(second.region.storage, first.region.storage);
    let page = backend.allocated() - 10 * MIB;
    assert!(
        page > grown + grown / 16,
        "the new page ({page} B) has room for the steps to come"
    );
    // Once the GC stage returns it, the step after fits the room: no new page.
    pool.park(second.slice, s).unwrap();
    assert_eq!(
        pool.release_parked(first.slice, false),
        Ok(ParkedReturn::default())
    );
    assert_eq!(pool.release_parked(second.slice, false), Ok(returned(2)));
    let third = pool
        .reserve_for(&mut backend, grown + 256 * KIB, id, s)
        .unwrap();
    assert_eq!(third.region.storage, second.region.storage);
}

/// The ladder's pools' counts summed: the largest allocation is the largest of theirs, and the
/// peak of pages the sum of their peaks.
fn ladder_report(pool: &MemoryPool) -> PoolReport {
    let mut sum = PoolReport::new("ladder".to_string());
    for report in pool.ladder.pools().map(|pool| pool.report()) {
        sum.pages += report.pages;
        sum.peak_pages += report.peak_pages;
        sum.allocs += report.allocs;
        sum.bytes_in_use += report.bytes_in_use;
        sum.bytes_reserved += report.bytes_reserved;
        sum.largest_alloc = sum.largest_alloc.max(report.largest_alloc);
        sum.pages_allocated += report.pages_allocated;
        sum.bytes_allocated += report.bytes_allocated;
        sum.bytes_moved += report.bytes_moved;
        sum.blocks_moved += report.blocks_moved;
    }
    sum
}

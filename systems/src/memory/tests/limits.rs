//! Limits: the recent peak, other pools' free memory, caps and spill, cleanup, out of memory,
//! oversized requests, and keys that stay stale.

use super::*;

#[test]
fn idle_memory_is_kept_for_the_recent_peak_and_goes_back_oldest_first_past_it() {
    let mut backend = device(1 << 26);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![exclusive(u64::MAX)]),
    );
    // The peak: two buffers of 512 KiB in use; then both idle, `older` the longest.
    let older = pool.reserve(&mut backend, 512 * KIB, AUTO).unwrap();
    let newer = pool.reserve(&mut backend, 512 * KIB, AUTO).unwrap();
    pool.release(older.slice).unwrap();
    pool.release(newer.slice).unwrap();

    // 256 KiB fits neither (it would waste half of one): a new buffer. Idle memory goes back
    // only as far as the budget needs, a 512th over the recent peak of 1 MiB: `older` goes,
    // `newer` stays cached although nothing uses it.
    let small = pool.reserve(&mut backend, 256 * KIB, AUTO).unwrap();
    assert_eq!(pool.usage().bytes_reserved, 768 * KIB);
    assert_eq!(backend.allocated(), 768 * KIB);
    assert_eq!(pool.free_slices(), 1, "the newer idle buffer stays");
    // A later request it fits takes it without a device call.
    let fits = pool.reserve(&mut backend, 480 * KIB, AUTO).unwrap();
    assert_eq!(fits.region.storage, newer.region.storage);
    assert_eq!(backend.allocated(), 768 * KIB);
    for reservation in [small, fits] {
        pool.release(reservation.slice).unwrap();
    }

    // A long run far below the peak (here 64 KiB at a time, 32 times the peak in all) lets the
    // peak age out: the next request that needs the device returns every idle buffer it can.
    for _ in 0..2 * 16 * 16 + 1 {
        let step = pool.reserve(&mut backend, 64 * KIB, AUTO).unwrap();
        pool.release(step.slice).unwrap();
    }
    assert_eq!(
        pool.usage().bytes_reserved,
        832 * KIB,
        "nothing grew meanwhile"
    );
    let grown = pool.reserve(&mut backend, 128 * KIB, AUTO).unwrap();
    assert_eq!(pool.usage().bytes_reserved, 128 * KIB);
    assert_eq!(backend.allocated(), 128 * KIB);
    pool.release(grown.slice).unwrap();
}

#[test]
fn a_request_its_pool_cannot_place_takes_free_memory_of_another_pool_before_the_device() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![
            sliced(64 * KIB, 4 * KIB, 4 * KIB),
            sliced(256 * KIB, 256 * KIB, u64::MAX),
        ]),
    );
    // A hole of 32 KiB between two live slices of the large pool's page.
    let left = pool.reserve(&mut backend, 32 * KIB, AUTO).unwrap();
    let hole = pool.reserve(&mut backend, 32 * KIB, AUTO).unwrap();
    let right = pool.reserve(&mut backend, 32 * KIB, AUTO).unwrap();
    pool.release(hole.slice).unwrap();
    let pages = backend.allocated();

    // A small request, routed to the small pool that has no page yet, fills the hole.
    let small = pool.reserve(&mut backend, 2 * KIB, AUTO).unwrap();
    assert_eq!(backend.allocated(), pages, "no device allocation");
    assert_eq!(small.region.storage, left.region.storage);
    assert_eq!(small.region.offset, 32 * KIB);
    assert_eq!(pool.reports()[0].allocs, 0);
    assert_eq!(pool.reports()[1].allocs, 3);

    // Released, it goes back to the pool it came from and merges with its free neighbour.
    pool.release(small.slice).unwrap();
    let again = pool.reserve(&mut backend, 32 * KIB, AUTO).unwrap();
    assert_eq!(
        (again.region.storage, again.region.offset),
        (hole.region.storage, hole.region.offset)
    );
    assert_eq!(backend.allocated(), pages);
    assert!(matches!(
        pool.release(small.slice),
        Err(MemoryError::StaleHandle { .. })
    ));
    for reservation in [left, again, right] {
        pool.release(reservation.slice).unwrap();
    }
}

#[test]
fn an_exclusive_device_gets_one_buffer_per_allocation() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Exclusive),
        &MemoryConfig::default(),
    );
    let regions: Vec<_> = (0..5)
        .map(|_| pool.reserve(&mut backend, 3000, AUTO).unwrap().region)
        .collect();
    for (i, region) in regions.iter().enumerate() {
        assert_eq!(region.offset, 0);
        assert!(regions[..i].iter().all(|r| r.storage != region.storage));
    }
}

#[test]
fn cleanup_returns_fully_free_pages_and_keeps_used_ones() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let a = pool.reserve(&mut backend, 60 * KIB, AUTO).unwrap();
    let b = pool.reserve(&mut backend, 60 * KIB, AUTO).unwrap();
    let c = pool.reserve(&mut backend, KIB, AUTO).unwrap();
    pool.release(a.slice).unwrap();
    pool.release(c.slice).unwrap();
    assert_eq!(backend.allocated(), 128 * KIB);
    pool.cleanup(&mut backend);
    assert_eq!(
        backend.allocated(),
        64 * KIB,
        "only the page of `b` is left"
    );
    assert_eq!(pool.usage().bytes_reserved, 64 * KIB);
    assert_eq!(pool.locate(b.slice).unwrap(), b.region);
    pool.release(b.slice).unwrap();
    pool.cleanup(&mut backend);
    assert_eq!(pool.usage(), MemoryUsage::default());
    assert_eq!(backend.allocated(), 0);
}

#[test]
fn a_capped_pool_that_is_full_spills_to_the_next_pool() {
    let mut backend = device(1 << 24);
    let mut capped = sliced(64 * KIB, 64 * KIB, 64 * KIB);
    capped.max_reserved = Some(64 * KIB);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![capped, sliced(MIB, MIB, u64::MAX)]),
    );
    let first = pool.reserve(&mut backend, 40 * KIB, AUTO).unwrap();
    let spilled = pool.reserve(&mut backend, 40 * KIB, AUTO).unwrap();
    let reports = pool.reports();
    assert_eq!((reports[0].pages, reports[1].pages), (1, 1), "{reports:?}");
    assert_eq!(reports[1].largest_alloc, 40 * KIB);
    assert_ne!(first.region.storage, spilled.region.storage);
}

#[test]
fn when_every_pool_is_capped_and_full_the_request_is_out_of_memory() {
    let mut backend = device(1 << 24);
    let mut capped = exclusive(u64::MAX);
    capped.max_reserved = Some(8 * KIB);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![capped]),
    );
    let kept = pool.reserve(&mut backend, 6 * KIB, AUTO).unwrap();
    let error = pool.reserve(&mut backend, 4 * KIB, AUTO).unwrap_err();
    assert!(
        matches!(
            error,
            MemoryError::OutOfMemory { requested, usage, .. }
                if requested == 4 * KIB && usage.bytes_in_use == 6 * KIB
        ),
        "{error}"
    );
    assert_eq!(pool.locate(kept.slice).unwrap(), kept.region);
}

#[test]
fn out_of_memory_cleans_up_and_retries_once_before_failing() {
    let mut backend = device(4 * KIB);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![exclusive(u64::MAX)]),
    );
    let free_me = pool.reserve(&mut backend, 2 * KIB, AUTO).unwrap();
    let kept = pool.reserve(&mut backend, KIB, AUTO).unwrap();
    pool.release(free_me.slice).unwrap();
    // 3 KiB fits only once the free 2 KiB buffer went back to the device.
    let after_cleanup = pool.reserve(&mut backend, 3 * KIB, AUTO).unwrap();
    let error = pool.reserve(&mut backend, 16 * KIB, AUTO).unwrap_err();
    assert!(
        matches!(
            error,
            MemoryError::OutOfMemory { requested, capacity, .. }
                if requested == 16 * KIB && capacity == Some(1 << 30)
        ),
        "{error}"
    );
    assert_eq!(pool.usage().bytes_in_use, 4 * KIB);
    assert_eq!(pool.locate(kept.slice).unwrap(), kept.region);
    assert_eq!(
        pool.locate(after_cleanup.slice).unwrap(),
        after_cleanup.region
    );
}

#[test]
fn a_request_over_the_largest_buffer_is_refused_before_the_device_or_the_cache_is_touched() {
    let mut backend = device(1 << 24);
    let limited = DeviceProperties {
        max_buffer_bytes: Some(64 * KIB),
        ..properties(256, MemoryLayout::Sliced)
    };
    let mut pool = MemoryPool::new(
        &limited,
        &MemoryConfig::with_pools(vec![exclusive(u64::MAX)]),
    );
    let cached = pool.reserve(&mut backend, 8 * KIB, AUTO).unwrap();
    pool.release(cached.slice).unwrap();
    let error = pool.reserve(&mut backend, 64 * KIB + 1, AUTO).unwrap_err();
    assert_eq!(
        error,
        MemoryError::BufferTooLarge {
            requested: 64 * KIB + 1,
            limit: 64 * KIB
        }
    );
    // Nothing was cleaned up for a request no cleanup could serve.
    assert_eq!(pool.usage().bytes_reserved, 8 * KIB);
    assert_eq!(backend.allocated(), 8 * KIB);
    let largest = pool.reserve(&mut backend, 64 * KIB, AUTO).unwrap();
    assert_eq!(largest.region.size, 64 * KIB);
}

#[test]
fn a_released_key_is_stale_even_after_its_memory_is_reused() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let first = pool.reserve(&mut backend, 512, AUTO).unwrap();
    pool.release(first.slice).unwrap();
    let reused = pool.reserve(&mut backend, 512, AUTO).unwrap();
    assert_eq!(reused.region, first.region, "same bytes");
    assert_ne!(reused.slice, first.slice, "new key");
    for error in [
        pool.release(first.slice).unwrap_err(),
        pool.locate(first.slice).unwrap_err(),
    ] {
        assert!(matches!(error, MemoryError::StaleHandle { .. }), "{error}");
    }
    assert_eq!(pool.locate(reused.slice).unwrap(), reused.region);
}

/// cubecl #1401: cleanup renumbered pages, so a live slice named a page that no longer existed.
#[test]
fn cleanup_never_renumbers_pages_so_live_slices_keep_their_buffer() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let pages: Vec<_> = (0..3)
        .map(|_| pool.reserve(&mut backend, 60 * KIB, AUTO).unwrap())
        .collect();
    pool.release(pages[0].slice).unwrap();
    pool.release(pages[1].slice).unwrap();
    pool.cleanup(&mut backend);
    assert_eq!(pool.locate(pages[2].slice).unwrap(), pages[2].region);
    let fresh = pool.reserve(&mut backend, 60 * KIB, AUTO).unwrap();
    assert_ne!(fresh.region.storage, pages[2].region.storage);
    pool.release(pages[2].slice).unwrap();
    assert!(matches!(
        pool.release(pages[0].slice),
        Err(MemoryError::StaleHandle { .. })
    ));
}

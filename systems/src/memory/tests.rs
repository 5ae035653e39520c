//! Unit tests of the pools behind `MemoryPool`, on the sim backend: reuse, coalescing, cleanup,
//! caps and spill, alignment, persistent windows, periodic release and stale keys.

use super::*;
use crate::backend::MemoryLayout;
use crate::error::MemoryError;
use crate::sim::{SimBackend, SimConfig};
use bevy_ecs::entity::Entity;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const AUTO: AllocationMode = AllocationMode::Auto;

fn device(memory_bytes: u64) -> SimBackend {
    SimBackend::new(
        SimConfig::default()
            .with_memory_bytes(memory_bytes)
            .with_record(false),
    )
}

fn properties(alignment: u64, memory_layout: MemoryLayout) -> DeviceProperties {
    DeviceProperties {
        name: "unit".into(),
        memory_bytes: 1 << 30,
        alignment,
        memory_layout,
        limits: Default::default(),
        features: Vec::new(),
        max_cube_count: [1; 3],
        max_cube_dim: [1; 3],
        max_units_per_cube: 1,
        max_buffer_bytes: None,
        page_mapping: None,
        slow_buffers: false,
    }
}

fn sliced(page_size: u64, max_slice: u64, max_alloc: u64) -> PoolConfig {
    PoolConfig {
        kind: PoolKind::Sliced {
            page_size,
            max_slice,
            first_page: page_size,
        },
        max_alloc,
        max_reserved: None,
        release_after_ticks: None,
    }
}

fn exclusive(max_alloc: u64) -> PoolConfig {
    PoolConfig {
        kind: PoolKind::Exclusive,
        max_alloc,
        max_reserved: None,
        release_after_ticks: None,
    }
}

/// A pool with one sliced pool of 64 KiB pages on a 256-byte-aligned device.
fn one_sliced_pool() -> MemoryPool {
    MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * KIB, 64 * KIB, u64::MAX)]),
    )
}

#[test]
fn a_released_slice_is_reused_without_a_new_page() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let first = pool.reserve(&mut backend, 1000, AUTO).unwrap();
    pool.release(first.slice).unwrap();
    let second = pool.reserve(&mut backend, 900, AUTO).unwrap();
    assert_eq!(second.region.storage, first.region.storage);
    assert_eq!(second.region.offset, 0, "first fit takes the lowest offset");
    assert_eq!(backend.allocated(), 64 * KIB, "one page, reused");
    assert_eq!(
        pool.usage(),
        MemoryUsage {
            number_allocs: 1,
            bytes_in_use: 900,
            bytes_padding: 124,
            bytes_reserved: 64 * KIB,
        }
    );
}

#[test]
fn freed_neighbours_coalesce_into_one_range() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let keys: Vec<_> = (0..4)
        .map(|_| pool.reserve(&mut backend, 16 * KIB, AUTO).unwrap())
        .collect();
    assert_eq!(pool.free_slices(), 0, "four 16 KiB slices fill the page");
    // Free the middle two in either order: they merge into one 32 KiB range.
    pool.release(keys[2].slice).unwrap();
    pool.release(keys[1].slice).unwrap();
    assert_eq!(pool.free_slices(), 1);
    let merged = pool.reserve(&mut backend, 32 * KIB, AUTO).unwrap();
    assert_eq!(merged.region.offset, 16 * KIB);
    assert_eq!(merged.region.storage, keys[0].region.storage);
    assert_eq!(backend.allocated(), 64 * KIB, "no second page was needed");
    // Freeing everything leaves one range covering the page.
    for key in [keys[0].slice, keys[3].slice, merged.slice] {
        pool.release(key).unwrap();
    }
    assert_eq!(pool.free_slices(), 1);
}

#[test]
fn first_fit_takes_the_first_page_that_has_room() {
    let mut backend = device(1 << 20);
    let mut pool = one_sliced_pool();
    let a = pool.reserve(&mut backend, 48 * KIB, AUTO).unwrap();
    let b = pool.reserve(&mut backend, 48 * KIB, AUTO).unwrap();
    assert_ne!(
        a.region.storage, b.region.storage,
        "the second does not fit the first page"
    );
    let small = pool.reserve(&mut backend, 8 * KIB, AUTO).unwrap();
    assert_eq!(small.region.storage, a.region.storage);
    assert_eq!(small.region.offset, 48 * KIB);
}

#[test]
fn every_offset_is_a_multiple_of_the_device_alignment() {
    for alignment in [64, 256] {
        let mut backend = device(1 << 24);
        let mut pool = MemoryPool::new(
            &properties(alignment, MemoryLayout::Sliced),
            &MemoryConfig::default(),
        );
        let mut live = Vec::new();
        for i in 1..200u64 {
            let reservation = pool.reserve(&mut backend, i * 37 % 5000 + 1, AUTO).unwrap();
            assert_eq!(reservation.region.offset % alignment, 0, "size {}", i * 37);
            live.push(reservation.slice);
            if i % 3 == 0 {
                pool.release(live.swap_remove(live.len() / 2)).unwrap();
            }
        }
    }
}

#[test]
fn an_oversized_request_gets_its_own_page_reused_only_within_an_eighth() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * KIB, 16 * KIB, u64::MAX)]),
    );
    let big = pool.reserve(&mut backend, 100 * KIB, AUTO).unwrap();
    assert_eq!(
        backend.allocated(),
        100 * KIB,
        "a page of its own, sized to it"
    );
    pool.release(big.slice).unwrap();
    // 90 KiB wastes 10%: the page accepts it.
    let close = pool.reserve(&mut backend, 90 * KIB, AUTO).unwrap();
    assert_eq!(close.region.storage, big.region.storage);
    pool.release(close.slice).unwrap();
    // 85 KiB would waste 15% of the 100 KiB page: it takes a new page instead, and the idle
    // page, past the budget with it, goes back to the device before the new one comes.
    let smaller = pool.reserve(&mut backend, 85 * KIB, AUTO).unwrap();
    assert_ne!(smaller.region.storage, big.region.storage);
    assert_eq!(backend.allocated(), 85 * KIB);
    assert_eq!(pool.usage().bytes_reserved, 85 * KIB);
}

#[test]
fn a_buffer_that_grows_a_little_each_step_gets_a_page_with_room_to_grow() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(MIB, 16 * KIB, u64::MAX)]),
    );
    let mut size = 100 * KIB;
    let first = pool.reserve(&mut backend, size, AUTO).unwrap();
    pool.release(first.slice).unwrap();
    // A 100th larger than the idle page (which goes back, past the budget): the new page has an
    // eighth of room, rounded down to the alignment.
    size += KIB;
    let grown = pool.reserve(&mut backend, size, AUTO).unwrap();
    assert_ne!(grown.region.storage, first.region.storage);
    assert_eq!(backend.allocated(), size * 8 / 7 / 256 * 256);
    pool.release(grown.slice).unwrap();
    // The next twelve steps fit in it: no device allocation.
    for _ in 0..12 {
        size += KIB;
        let step = pool.reserve(&mut backend, size, AUTO).unwrap();
        assert_eq!(step.region.storage, grown.region.storage, "{size}");
        pool.release(step.slice).unwrap();
    }
    // A request far past it is no growth: a page of exactly its size.
    let jump = pool.reserve(&mut backend, 130 * KIB, AUTO).unwrap();
    assert_eq!(backend.allocated(), 130 * KIB);
    pool.release(jump.slice).unwrap();
}

#[test]
fn room_to_grow_never_makes_a_capped_pool_refuse_a_request_that_fits() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![
            sliced(MIB, 16 * KIB, u64::MAX).with_max_reserved(Some(110 * KIB)),
        ]),
    );
    let first = pool.reserve(&mut backend, 100 * KIB, AUTO).unwrap();
    pool.release(first.slice).unwrap();
    // Growth, but an eighth more would pass the cap: a page of exactly the request.
    let grown = pool.reserve(&mut backend, 101 * KIB, AUTO).unwrap();
    assert_eq!(backend.allocated(), 101 * KIB);
    pool.release(grown.slice).unwrap();
}

#[test]
fn an_exclusive_buffer_is_reused_only_if_it_wastes_at_most_a_fifth() {
    let mut backend = device(1 << 24);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![exclusive(u64::MAX)]),
    );
    let first = pool.reserve(&mut backend, 10 * KIB, AUTO).unwrap();
    pool.release(first.slice).unwrap();
    let fits = pool.reserve(&mut backend, 8 * KIB, AUTO).unwrap();
    assert_eq!(fits.region.storage, first.region.storage);
    assert_eq!(
        pool.usage().bytes_padding,
        2 * KIB,
        "the unused fifth is padding"
    );
    pool.release(fits.slice).unwrap();
    // 7 KiB would waste 30%: a new buffer, and the idle one goes back first.
    let too_small = pool.reserve(&mut backend, 7 * KIB, AUTO).unwrap();
    assert_ne!(too_small.region.storage, first.region.storage);
    assert_eq!(pool.usage().bytes_reserved, 7 * KIB);
}

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

#[test]
fn persistent_buffers_are_exact_size_and_survive_periodic_cleanup() {
    let mut backend = device(1 << 24);
    let mut config = sliced(64 * KIB, 64 * KIB, u64::MAX);
    config.release_after_ticks = Some(2);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![config]),
    );
    let weights = pool
        .reserve(&mut backend, 3000, AllocationMode::Persistent)
        .unwrap();
    assert_eq!(
        backend.allocated(),
        3072,
        "its own buffer, padded to the alignment"
    );
    pool.release(weights.slice).unwrap();
    for tick in 1..10 {
        pool.periodic_cleanup(&mut backend, tick);
    }
    assert_eq!(
        pool.usage().bytes_reserved,
        3072,
        "periodic cleanup keeps it"
    );
    // An Auto request of the same padded size reuses the persistent buffer.
    let same = pool.reserve(&mut backend, 3050, AUTO).unwrap();
    assert_eq!(same.region.storage, weights.region.storage);
    pool.release(same.slice).unwrap();
    pool.cleanup(&mut backend);
    assert_eq!(backend.allocated(), 0, "explicit cleanup returns it");
}

#[test]
fn nested_mode_windows_decide_where_a_stream_allocates() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (stream, other) = (StreamId { value: 7 }, StreamId { value: 8 });
    let (s7, s8) = (
        Entity::from_raw_u32(7).unwrap(),
        Entity::from_raw_u32(8).unwrap(),
    );
    let persistent_pool = |pool: &MemoryPool| pool.reports().last().map_or(0, |r| r.allocs);
    pool.modes_mut().push(stream, AllocationMode::Persistent);
    pool.reserve_for(&mut backend, 100, stream, s7).unwrap();
    pool.reserve_for(&mut backend, 100, other, s8).unwrap();
    assert_eq!(persistent_pool(&pool), 1, "only the stream in the window");
    pool.modes_mut().push(stream, AllocationMode::Auto);
    pool.reserve_for(&mut backend, 100, stream, s7).unwrap();
    assert_eq!(persistent_pool(&pool), 1, "the inner Auto window wins");
    assert!(pool.modes_mut().pop(stream));
    pool.reserve_for(&mut backend, 100, stream, s7).unwrap();
    assert_eq!(persistent_pool(&pool), 2, "back in the persistent window");
    assert!(pool.modes_mut().pop(stream));
    pool.reserve_for(&mut backend, 100, stream, s7).unwrap();
    assert_eq!(persistent_pool(&pool), 2);
    assert!(
        pool.describe()
            .lines()
            .all(|l| !l.contains("allocation mode"))
    );
}

#[test]
fn a_free_page_returns_to_the_device_after_its_delay_unless_reused() {
    let mut backend = device(1 << 24);
    let mut config = sliced(64 * KIB, 64 * KIB, u64::MAX);
    config.release_after_ticks = Some(3);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![config]),
    );
    let a = pool.reserve(&mut backend, KIB, AUTO).unwrap();
    pool.release(a.slice).unwrap();
    pool.periodic_cleanup(&mut backend, 10); // stamped free at tick 10
    let b = pool.reserve(&mut backend, KIB, AUTO).unwrap();
    pool.periodic_cleanup(&mut backend, 13);
    assert_eq!(
        backend.allocated(),
        64 * KIB,
        "reused before the delay: kept"
    );
    pool.release(b.slice).unwrap();
    pool.periodic_cleanup(&mut backend, 14); // stamped free at tick 14
    pool.periodic_cleanup(&mut backend, 16);
    assert_eq!(backend.allocated(), 64 * KIB, "free for 2 ticks: kept");
    pool.periodic_cleanup(&mut backend, 17);
    assert_eq!(backend.allocated(), 0, "free for 3 ticks: returned");
    assert_eq!(pool.usage().bytes_reserved, 0);
}

/// `handles` handles' parked memory returned, no cleanup waiting for it.
fn returned(handles: u64) -> ParkedReturn {
    ParkedReturn {
        handles,
        awaited: false,
    }
}

fn stream_entities() -> (Entity, Entity) {
    (
        Entity::from_raw_u32(1).unwrap(),
        Entity::from_raw_u32(2).unwrap(),
    )
}

#[test]
fn a_parked_slice_serves_its_own_stream_at_once_and_no_other() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    let first = pool.reserve_for(&mut backend, 1000, id, s).unwrap();
    assert!(!first.parked_by_stream);
    pool.park(first.slice, s).unwrap();
    assert_eq!(pool.usage().bytes_in_use, 0, "parked memory is not in use");
    assert_eq!(pool.parked().0, 1);
    // Another stream may not take it: its work could run before the parking stream's.
    let other = pool.reserve_for(&mut backend, 1000, id, t).unwrap();
    assert!(!other.parked_by_stream);
    assert_ne!(other.region.offset, first.region.offset);
    // The parking stream takes it, under a new key; the old key is dead.
    let again = pool.reserve_for(&mut backend, 900, id, s).unwrap();
    assert!(again.parked_by_stream);
    assert_eq!(again.region.storage, first.region.storage);
    assert_eq!(again.region.offset, first.region.offset);
    assert_eq!(again.region.size, 900);
    assert_ne!(again.slice, first.slice);
    assert_eq!(pool.parked(), (0, 0));
    assert_eq!(
        pool.release_parked(first.slice, false),
        Ok(ParkedReturn::default()),
        "taken: nothing to return"
    );
    assert_eq!(pool.usage().bytes_in_use, 900 + 1000);
    assert_eq!(pool.usage().number_allocs, 2);
}

#[test]
fn a_parked_slice_returns_to_the_pool_for_every_stream_once_released() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    let first = pool.reserve_for(&mut backend, 1000, id, s).unwrap();
    pool.park(first.slice, s).unwrap();
    assert_eq!(pool.release_parked(first.slice, false), Ok(returned(1)));
    assert_eq!(pool.parked(), (0, 0));
    assert_eq!(pool.usage().number_allocs, 0);
    let other = pool.reserve_for(&mut backend, 1000, id, t).unwrap();
    assert!(!other.parked_by_stream, "from the pool, not parked memory");
    assert_eq!(other.region.offset, first.region.offset);
    // A live slice is not parked: releasing it as parked is a bug, reported.
    assert!(pool.release_parked(other.slice, false).is_err());
    assert!(pool.park(other.slice, t).is_ok());
    assert!(pool.park(other.slice, t).is_err(), "parked twice");
}

#[test]
fn a_stream_takes_part_of_its_parked_slice_and_the_rest_returns_with_the_handle() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    // A live 40 KiB keeps the 64 KiB page within the budget.
    let _live = pool.reserve_for(&mut backend, 40 * KIB, id, s).unwrap();
    let big = pool.reserve_for(&mut backend, 10 * KIB, id, s).unwrap();
    pool.park(big.slice, s).unwrap();
    let larger = pool.reserve_for(&mut backend, 11 * KIB, id, s).unwrap();
    assert!(!larger.parked_by_stream, "does not fit");
    // 1 KiB takes the head of the parked 10 KiB; the other 9 KiB stay parked for the stream.
    let small = pool.reserve_for(&mut backend, KIB, id, s).unwrap();
    assert!(small.parked_by_stream);
    assert_eq!(small.region.offset, big.region.offset);
    assert_eq!(pool.parked(), (1, 9 * KIB));
    assert_eq!(
        pool.usage().bytes_padding,
        0,
        "no part of the block is wasted"
    );
    // Another stream may not take the rest before the device is done with it.
    let other = pool.reserve_for(&mut backend, 9 * KIB, id, t).unwrap();
    assert!(!other.parked_by_stream);
    assert_ne!(other.region.offset, big.region.offset + KIB);
    pool.release(other.slice).unwrap();
    // The parked handle's release returns the rest to the pool, for every stream.
    assert_eq!(pool.release_parked(big.slice, false), Ok(returned(1)));
    assert_eq!(pool.parked(), (0, 0));
    let other = pool.reserve_for(&mut backend, 9 * KIB, id, t).unwrap();
    assert!(!other.parked_by_stream, "from the pool");
    assert_eq!(other.region.offset, big.region.offset + KIB);
    // Persistent windows never take parked memory.
    pool.park(small.slice, s).unwrap();
    pool.modes_mut().push(id, AllocationMode::Persistent);
    let persistent = pool.reserve_for(&mut backend, KIB, id, s).unwrap();
    assert!(!persistent.parked_by_stream);
}

#[test]
fn neighbours_parked_in_one_tick_join_and_come_back_with_their_last_handle() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, _) = stream_entities();
    let id = StreamId { value: 0 };
    let _live = pool.reserve_for(&mut backend, 40 * KIB, id, s).unwrap();
    let a = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    let b = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    let c = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    assert_eq!(b.region.offset, a.region.offset + 4 * KIB);
    // Parked out of order, the three join into one block.
    pool.park(a.slice, s).unwrap();
    pool.park(c.slice, s).unwrap();
    pool.park(b.slice, s).unwrap();
    assert_eq!(pool.parked(), (1, 12 * KIB));
    // Their memory comes back once the GC stage released all three handles.
    // A cleanup waits for c's memory: the group's return says so.
    assert_eq!(
        pool.release_parked(c.slice, true),
        Ok(ParkedReturn::default())
    );
    assert_eq!(
        pool.release_parked(a.slice, false),
        Ok(ParkedReturn::default())
    );
    assert_eq!(pool.parked(), (1, 12 * KIB));
    assert_eq!(
        pool.release_parked(b.slice, false),
        Ok(ParkedReturn {
            handles: 3,
            awaited: true
        })
    );
    assert_eq!(pool.parked(), (0, 0));
    // A joined block serves a request larger than any of its parts.
    let d = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    let e = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    pool.park(d.slice, s).unwrap();
    pool.park(e.slice, s).unwrap();
    let joined = pool.reserve_for(&mut backend, 8 * KIB, id, s).unwrap();
    assert!(joined.parked_by_stream);
    assert_eq!(joined.region.offset, d.region.offset);
    assert_eq!(pool.usage().bytes_reserved, 64 * KIB, "no new page");
    // Taken whole: the handles' releases find nothing to return.
    assert_eq!(
        pool.release_parked(d.slice, false),
        Ok(ParkedReturn::default())
    );
    assert_eq!(
        pool.release_parked(e.slice, false),
        Ok(ParkedReturn::default())
    );
}

#[test]
fn slices_parked_in_different_ticks_stay_apart() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    let a = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    let b = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    let c = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    pool.park(a.slice, s).unwrap();
    pool.seal_parking();
    pool.park(b.slice, s).unwrap();
    // Another stream's neighbour never joins either.
    pool.park(c.slice, t).unwrap();
    assert_eq!(pool.parked(), (3, 12 * KIB));
    // Each goes back with its own handle.
    assert_eq!(pool.release_parked(b.slice, false), Ok(returned(1)));
    assert_eq!(pool.parked(), (2, 8 * KIB));
    assert_eq!(pool.release_parked(a.slice, false), Ok(returned(1)));
    assert_eq!(pool.release_parked(c.slice, false), Ok(returned(1)));
    assert_eq!(pool.usage().number_allocs, 0);
    assert_eq!(pool.reports()[0].allocs, 0);
}

#[test]
fn a_page_of_its_own_is_not_split_for_a_much_smaller_request() {
    let mut backend = device(1 << 24);
    // Slices up to 16 KiB share pages; larger requests get pages of their own.
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * KIB, 16 * KIB, u64::MAX)]),
    );
    let (s, _) = stream_entities();
    let id = StreamId { value: 0 };
    let own = pool.reserve_for(&mut backend, 32 * KIB, id, s).unwrap();
    pool.park(own.slice, s).unwrap();
    let small = pool.reserve_for(&mut backend, 20 * KIB, id, s).unwrap();
    assert!(!small.parked_by_stream, "20 KiB would hold the whole page");
    let close = pool.reserve_for(&mut backend, 30 * KIB, id, s).unwrap();
    assert!(close.parked_by_stream, "within a fifth: taken whole");
    assert_eq!(close.region.storage, own.region.storage);
}

#[test]
fn past_the_budget_a_request_waits_for_parked_memory_a_bounded_number_of_ticks() {
    let mut backend = device(1 << 30);
    let mut pool = MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * MIB, 16 * MIB, u64::MAX)]),
    );
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    let parked = pool.reserve_for(&mut backend, 32 * MIB, id, s).unwrap();
    pool.park(parked.slice, s).unwrap();
    // Nothing free holds 24 MiB and nothing else is in use: a new page would nearly double what
    // is reserved while the parked 32 MiB comes back soon.
    assert!(pool.waits_for_parked(24 * MIB, id, t));
    // Not for more than is parked, nor for a request too small to matter (under 1 MiB here).
    assert!(
        !pool.waits_for_parked(64 * MIB, id, t),
        "more than is parked"
    );
    assert!(!pool.waits_for_parked(MIB / 2, id, t), "half a MiB");
    assert!(pool.waits_for_parked(24 * MIB, id, t));
    // Nor for ever.
    let waits = (0..1000)
        .take_while(|_| pool.waits_for_parked(24 * MIB, id, t))
        .count();
    assert!(
        (1..=PARKED_WAITS as usize).contains(&waits),
        "waited {waits} times in a row: then the request goes ahead"
    );
    // Once the memory is back, it is free: the page too large for the request goes back to the
    // device before a new one is made, so what is reserved never doubles.
    assert_eq!(pool.release_parked(parked.slice, false), Ok(returned(1)));
    assert!(!pool.waits_for_parked(24 * MIB, id, t));
    pool.reserve_for(&mut backend, 24 * MIB, id, t).unwrap();
    assert_eq!(pool.usage().bytes_reserved, 24 * MIB);
    assert_eq!(backend.allocated(), 24 * MIB);
}

#[test]
fn a_tick_that_parked_a_32nd_of_the_peak_is_full() {
    let mut backend = device(1 << 28);
    let mut pool = one_sliced_pool();
    let (s, _) = stream_entities();
    let id = StreamId { value: 0 };
    let held: Vec<_> = (0..40)
        .map(|_| pool.reserve_for(&mut backend, 64 * KIB, id, s).unwrap())
        .collect();
    // 2.5 MiB live at the peak: a tick is full once it parked more than 1 MiB.
    for reservation in &held[..16] {
        assert!(!pool.parking_full());
        pool.park(reservation.slice, s).unwrap();
    }
    assert!(!pool.parking_full(), "1 MiB parked");
    pool.park(held[16].slice, s).unwrap();
    assert!(pool.parking_full());
    pool.seal_parking();
    assert!(!pool.parking_full(), "a new tick");
}

#[test]
fn past_the_budget_a_larger_parked_slice_serves_a_request_rather_than_a_new_page() {
    let mut backend = device(1 << 24);
    let mut pool = one_sliced_pool();
    let (s, t) = stream_entities();
    let id = StreamId { value: 0 };
    // The page is full: 60 KiB live, 4 KiB parked.
    let _live = pool.reserve_for(&mut backend, 60 * KIB, id, s).unwrap();
    let parked = pool.reserve_for(&mut backend, 4 * KIB, id, s).unwrap();
    pool.park(parked.slice, s).unwrap();
    // 1 KiB would waste three quarters of the parked 4 KiB, but a new page would reserve
    // twice what is in use: the stream takes its parked slice.
    let small = pool.reserve_for(&mut backend, KIB, id, s).unwrap();
    assert!(small.parked_by_stream);
    assert_eq!(small.region.offset, parked.region.offset);
    assert_eq!(pool.usage().bytes_reserved, 64 * KIB);
    // Another stream may not take it: it gets a new page.
    pool.park(small.slice, s).unwrap();
    let other = pool.reserve_for(&mut backend, KIB, id, t).unwrap();
    assert!(!other.parked_by_stream);
    assert_eq!(pool.usage().bytes_reserved, 128 * KIB);
}

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

/// The ladder, a `Pool` itself, counts what its pools count: after every reserve, release,
/// cleanup and idle release of a seeded mix of sizes over every pool of the default ladder, its
/// report is the sum of theirs, and each slice is found in the pool that placed it.
#[test]
fn the_ladder_reports_the_sum_of_its_pools_through_a_mix_of_sizes() {
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
        let report = pool.ladder.report();
        let pools: Vec<PoolReport> = pool.ladder.pools().map(|p| p.report()).collect();
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
    assert_eq!(pool.ladder.report().allocs, 0);
    assert_eq!(pool.ladder.report().bytes_reserved, 0);
    assert!(pool.ladder.report().peak_pages > 0);
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

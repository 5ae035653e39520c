//! Where a request lands: reuse, coalescing, first fit, alignment, pages of their own, room to
//! grow, exclusive buffers.

use super::*;

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

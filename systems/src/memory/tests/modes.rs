//! Allocation modes (persistent buffers, nested windows) and the periodic release of free pages.

use super::*;

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

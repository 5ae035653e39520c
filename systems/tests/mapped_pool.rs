//! The mapped pool (`PoolKind::Mapped`) on a virtual device that maps pages and checks every
//! call (no page mapped twice, none unmapped that was not mapped, no range freed with pages
//! mapped): what it maps, what a hole costs, what goes back and when, refusals, and a seeded
//! random workload whose every live allocation must lie on mapped pages and overlap no other.

#[path = "../../benches/common/virtual_device.rs"]
mod virtual_device;

use gpuworld_systems::backend::{Backend, StorageId};
use gpuworld_systems::error::MemoryError;
use gpuworld_systems::memory::{
    AllocationMode, MemoryConfig, MemoryPool, PoolConfig, PoolKind, Reservation,
};
use virtual_device::VirtualDevice;

/// [`chunked_pool`] mapping one page per call.
fn mapped_pool(device: &VirtualDevice, range: u64, release_after: Option<u64>) -> MemoryPool {
    chunked_pool(device, PAGE, range, release_after)
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const PAGE: u64 = 64 * KIB;
const AUTO: AllocationMode = AllocationMode::Auto;

/// A device of `memory` bytes (refusing past it) that maps pages of 64 KiB.
fn device(memory: u64) -> VirtualDevice {
    let mut device = VirtualDevice::new(memory, 256);
    device.page_mapping = Some(PAGE);
    device
}

/// One mapped pool of 64 KiB pages in ranges of `range` bytes, for every request, mapping at
/// most `chunk` bytes per device call.
fn chunked_pool(
    device: &VirtualDevice,
    chunk: u64,
    range: u64,
    release_after: Option<u64>,
) -> MemoryPool {
    let pool = PoolConfig::new(
        PoolKind::Mapped {
            page_size: PAGE,
            chunk_size: chunk,
            range_size: range,
        },
        u64::MAX,
    )
    .with_release_after_ticks(release_after);
    MemoryPool::new(&device.properties(), &MemoryConfig::with_pools(vec![pool]))
}

fn reserve(pool: &mut MemoryPool, device: &mut VirtualDevice, bytes: u64) -> Reservation {
    pool.reserve(device, bytes, AUTO)
        .unwrap_or_else(|error| panic!("{bytes} bytes refused: {error}"))
}

#[test]
fn only_the_pages_live_allocations_touch_are_mapped_and_neighbours_share_them() {
    let mut device = device(64 * MIB);
    let mut pool = mapped_pool(&device, 16 * MIB, None);
    let first = reserve(&mut pool, &mut device, 100 * KIB);
    assert_eq!(device.allocated, 2 * PAGE, "100 KiB touches two pages");
    // The next allocation packs behind the first, in the page it left partly free.
    let second = reserve(&mut pool, &mut device, 20 * KIB);
    assert_eq!(second.region.storage, first.region.storage);
    assert_eq!(second.region.offset, 100 * KIB);
    assert_eq!(device.allocated, 2 * PAGE, "no new page");
    assert_eq!(pool.usage().bytes_reserved, 2 * PAGE);
    assert!(device.mapped_under(first.region.storage, 0, 120 * KIB));
    assert_eq!(device.address_ranges(), 1);
}

#[test]
fn a_freed_hole_costs_only_its_partial_pages_once_idle_pages_go_back() {
    let mut device = device(64 * MIB);
    let mut pool = mapped_pool(&device, 16 * MIB, None);
    let left = reserve(&mut pool, &mut device, MIB + 10 * KIB);
    let middle = reserve(&mut pool, &mut device, 2 * MIB);
    let right = reserve(&mut pool, &mut device, MIB);
    pool.release(middle.slice).unwrap();
    // Idle pages stay mapped for the next request until the pool makes room or cleans up.
    assert_eq!(
        device.allocated,
        (4 * MIB + 10 * KIB).next_multiple_of(PAGE)
    );
    pool.cleanup(&mut device);
    // Of the hole, only the page it shares with `left` and the one it shares with `right` stay.
    let live_pages = |offset: u64, len: u64| (offset + len).div_ceil(PAGE) - offset / PAGE;
    let expected = live_pages(left.region.offset, left.region.size)
        + live_pages(right.region.offset, right.region.size);
    assert_eq!(device.allocated, expected * PAGE);
    assert_eq!(pool.usage().bytes_reserved, expected * PAGE);
    assert!(device.mapped_under(left.region.storage, left.region.offset, left.region.size));
    assert!(device.mapped_under(right.region.storage, right.region.offset, right.region.size));
    // The hole is reused by the next request that fits it, best fit, at its start.
    let again = reserve(&mut pool, &mut device, MIB);
    assert_eq!(again.region.offset, middle.region.offset);
}

#[test]
fn cleanup_unmaps_every_idle_page_and_returns_empty_ranges() {
    let mut device = device(64 * MIB);
    let mut pool = mapped_pool(&device, 4 * MIB, None);
    let held: Vec<Reservation> = (0..6)
        .map(|_| reserve(&mut pool, &mut device, 3 * MIB))
        .collect();
    assert_eq!(
        device.address_ranges(),
        6,
        "a 4 MiB range holds one 3 MiB request"
    );
    for reservation in held {
        pool.release(reservation.slice).unwrap();
    }
    pool.cleanup(&mut device);
    assert_eq!(device.allocated, 0);
    assert_eq!(device.address_ranges(), 0);
    assert_eq!(pool.usage().bytes_reserved, 0);
    // And the pool serves again afterwards.
    reserve(&mut pool, &mut device, MIB);
    assert_eq!(device.allocated, MIB);
}

#[test]
fn idle_pages_go_back_after_release_after_ticks_unless_reused() {
    let mut device = device(64 * MIB);
    let mut pool = mapped_pool(&device, 16 * MIB, Some(3));
    let kept = reserve(&mut pool, &mut device, MIB);
    let freed = reserve(&mut pool, &mut device, MIB);
    pool.release(freed.slice).unwrap();
    pool.periodic_cleanup(&mut device, 10);
    pool.periodic_cleanup(&mut device, 12);
    assert_eq!(device.allocated, 2 * MIB, "idle for 2 ticks: kept");
    pool.periodic_cleanup(&mut device, 13);
    assert_eq!(device.allocated, MIB, "idle for 3 ticks: unmapped");
    assert!(device.mapped_under(kept.region.storage, kept.region.offset, MIB));
}

#[test]
fn a_refused_mapping_is_out_of_memory_and_the_pool_stays_usable() {
    let mut device = device(8 * MIB);
    let mut pool = mapped_pool(&device, 64 * MIB, None);
    let held = reserve(&mut pool, &mut device, 4 * MIB);
    let error = pool.reserve(&mut device, 6 * MIB, AUTO).unwrap_err();
    assert!(
        matches!(error, MemoryError::OutOfMemory { requested, .. } if requested == 6 * MIB),
        "{error}"
    );
    // A refused request leaves nothing mapped behind.
    assert_eq!(device.allocated, 4 * MIB);
    let fits = reserve(&mut pool, &mut device, 4 * MIB);
    assert!(device.mapped_under(fits.region.storage, fits.region.offset, 4 * MIB));
    pool.release(held.slice).unwrap();
    pool.release(fits.slice).unwrap();
    pool.cleanup(&mut device);
    assert_eq!(device.allocated, 0);
}

#[test]
fn the_default_ladder_maps_only_requests_over_half_a_large_page() {
    let mut device = device(1 << 30);
    let mut pool = MemoryPool::new(&device.properties(), &MemoryConfig::default());
    let small = reserve(&mut pool, &mut device, 8 * MIB);
    let large = reserve(&mut pool, &mut device, 40 * MIB + 1);
    assert!(
        !device.mapped_under(small.region.storage, 0, 1),
        "8 MiB gets a buffer of its own"
    );
    assert!(device.mapped_under(large.region.storage, large.region.offset, large.region.size));
    let off = MemoryPool::new(
        &device.properties(),
        &MemoryConfig::default().with_map_pages(false),
    );
    assert!(
        !off.describe().contains("mapped"),
        "map_pages off: no mapped pool\n{}",
        off.describe()
    );
}

#[test]
fn a_repeated_large_size_gets_a_buffer_of_its_own_reused_whole() {
    let size = 40 * MIB + 1;
    for repeat_buffers in [true, false] {
        let mut device = device(1 << 30);
        let config = MemoryConfig::default().with_repeat_buffers(repeat_buffers);
        let mut pool = MemoryPool::new(&device.properties(), &config);
        let first = reserve(&mut pool, &mut device, size);
        assert!(
            device.mapped_under(first.region.storage, first.region.offset, first.region.size),
            "a size not seen before is mapped"
        );
        let calls = device.allocations;
        // The same size again, with the first still live: the pool must grow.
        let second = reserve(&mut pool, &mut device, size);
        if !repeat_buffers {
            assert!(
                device.mapped_under(second.region.storage, second.region.offset, size),
                "repeat_buffers off: mapped again"
            );
            assert!(device.allocations - calls > 1, "one call per page");
            continue;
        }
        assert!(
            !device.mapped_under(second.region.storage, 0, 1),
            "a repeated size gets a buffer of its own"
        );
        assert_eq!(
            device.allocations,
            calls + 1,
            "one device call, not one per page"
        );
        pool.release(second.slice).unwrap();
        let third = reserve(&mut pool, &mut device, size);
        assert_eq!(
            third.region.storage, second.region.storage,
            "the idle buffer serves the next request of its size"
        );
        assert_eq!(device.allocations, calls + 1, "no device call");
        assert!(pool.usage().bytes_reserved <= 2 * size.next_multiple_of(PAGE) + 2 * PAGE);
    }
}

/// A tiny deterministic generator (xorshift), so the workload is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn a_chunk_is_mapped_by_one_call_and_goes_back_once_none_of_its_pages_is_used() {
    let mut device = device(64 * MIB);
    let mut pool = chunked_pool(&device, 4 * PAGE, 16 * MIB, None);
    // Ten pages: chunks of 4, 4 and 2, one device allocation each.
    let big = reserve(&mut pool, &mut device, 10 * PAGE);
    assert_eq!(device.allocations, 3);
    assert_eq!(device.allocated, 10 * PAGE);
    pool.release(big.slice).unwrap();
    // A small request takes the start of the idle first chunk (no new mapping)...
    let small = reserve(&mut pool, &mut device, PAGE);
    assert_eq!(small.region.offset, 0);
    assert_eq!(device.allocations, 3);
    // ...which keeps that whole chunk mapped; the idle chunks after it go back.
    pool.cleanup(&mut device);
    assert_eq!(device.allocated, 4 * PAGE);
    pool.release(small.slice).unwrap();
    pool.cleanup(&mut device);
    assert_eq!(device.allocated, 0);
    assert_eq!(device.address_ranges(), 0);
}

#[test]
fn random_allocations_always_lie_on_mapped_pages_and_never_overlap() {
    for seed in 1..=24u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut device = device(256 * MIB);
        // One, two or five pages per device call.
        let chunk = [1, 2, 5][seed as usize % 3] * PAGE;
        let mut pool = chunked_pool(&device, chunk, 32 * MIB, None);
        let mut live: Vec<Reservation> = Vec::new();
        for step in 0..600 {
            if live.is_empty() || rng.below(100) < 55 {
                // Sizes from 1 byte to 4 MiB, log-uniform.
                let bits = rng.below(23);
                let bytes = 1 + rng.below(1 << bits);
                let reservation = reserve(&mut pool, &mut device, bytes);
                live.push(reservation);
            } else {
                let victim = live.swap_remove(rng.below(live.len() as u64) as usize);
                pool.release(victim.slice).unwrap();
            }
            if rng.below(50) == 0 {
                pool.cleanup(&mut device);
            }
            let mut spans: Vec<(StorageId, u64, u64)> = live
                .iter()
                .map(|r| (r.region.storage, r.region.offset, r.region.size))
                .collect();
            for &(storage, offset, size) in &spans {
                assert!(
                    device.mapped_under(storage, offset, size),
                    "seed {seed} step {step}: {size} bytes at {offset} not mapped"
                );
            }
            spans.sort_by_key(|&(storage, offset, _)| (storage.0, offset));
            for pair in spans.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                assert!(
                    a.0 != b.0 || a.1 + a.2 <= b.1,
                    "seed {seed} step {step}: {a:?} overlaps {b:?}"
                );
            }
            assert_eq!(pool.usage().bytes_reserved, device.allocated, "seed {seed}");
            let in_use: u64 = live.iter().map(|r| r.region.size).sum();
            assert_eq!(pool.usage().bytes_in_use, in_use, "seed {seed}");
        }
        for reservation in live.drain(..) {
            pool.release(reservation.slice).unwrap();
        }
        pool.cleanup(&mut device);
        assert_eq!(device.allocated, 0, "seed {seed}: everything unmapped");
        assert_eq!(
            device.address_ranges(),
            0,
            "seed {seed}: every range returned"
        );
    }
}

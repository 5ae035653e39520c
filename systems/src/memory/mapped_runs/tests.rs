//! The runs pool against a device that checks every call's pages: mapped once, unmapped only
//! where mapped, in any run (the device splits mappings).

use super::*;
use std::collections::BTreeSet;

/// A device whose mappings split, keeping the set of mapped pages and counting calls; it refuses
/// the map calls `refuse` says to.
#[derive(Default)]
struct HostPages {
    ranges: u64,
    /// Mapped pages, as (range, first byte).
    mapped: BTreeSet<(u64, u64)>,
    map_calls: u64,
    unmap_calls: u64,
    /// Refuse map calls from now on.
    refuse: bool,
    freed_ranges: u64,
}

impl HostPages {
    fn mapped_bytes(&self) -> u64 {
        self.mapped.len() as u64 * PAGE
    }

    fn is_mapped(&self, block: &Block, page: u64) -> bool {
        self.mapped
            .contains(&(block.storage.0, block.offset / PAGE * PAGE + page * PAGE))
    }
}

impl DeviceMemory for HostPages {
    fn allocate(&mut self, _size: u64) -> Result<StorageId, AllocError> {
        self.ranges += 1;
        Ok(StorageId(self.ranges))
    }
    unsafe fn deallocate(&mut self, _storage: StorageId) {}
    fn reserve_addresses(&mut self, _size: u64) -> Result<StorageId, AllocError> {
        self.ranges += 1;
        Ok(StorageId(self.ranges))
    }
    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError> {
        if self.refuse {
            return Err(AllocError::OutOfMemory);
        }
        assert!(
            offset.is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && len > 0,
            "whole pages"
        );
        for page in (offset..offset + len).step_by(PAGE as usize) {
            assert!(
                self.mapped.insert((storage.0, page)),
                "page {page} mapped twice"
            );
        }
        self.map_calls += 1;
        Ok(())
    }
    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        assert!(
            offset.is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && len > 0,
            "whole pages"
        );
        for page in (offset..offset + len).step_by(PAGE as usize) {
            assert!(
                self.mapped.remove(&(storage.0, page)),
                "page {page} not mapped"
            );
        }
        self.unmap_calls += 1;
    }
    fn trim_pages(&mut self) {}
    unsafe fn free_addresses(&mut self, storage: StorageId) {
        assert!(
            !self.mapped.iter().any(|&(range, _)| range == storage.0),
            "addresses freed under mapped pages"
        );
        self.freed_ranges += 1;
    }
}

const PAGE: u64 = 4096;

/// A pool of 4 KiB pages in ranges of 1024 pages.
fn pool() -> MappedRunsPool {
    MappedRunsPool::new("test".into(), PAGE, 1024 * PAGE, None, None)
}

fn place(pool: &mut MappedRunsPool, device: &mut HostPages, len: u64) -> Block {
    match pool.try_reserve(len, len) {
        Some(block) => block,
        None => pool.grow(device, len, len).unwrap().expect("no cap"),
    }
}

/// The pool's own count of what it holds agrees with the device's.
fn agrees(pool: &MappedRunsPool, device: &HostPages) {
    assert_eq!(pool.report().bytes_reserved, device.mapped_bytes());
}

#[test]
fn a_request_of_many_pages_is_mapped_by_one_call() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    place(&mut pool, &mut device, 256 * PAGE);
    assert_eq!((device.map_calls, device.mapped_bytes()), (1, 256 * PAGE));
    assert_eq!(pool.report().pages, 256);
    agrees(&pool, &device);
}

#[test]
fn a_hole_of_exactly_the_requests_size_is_reused_without_mapping() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    let blocks: Vec<Block> = (0..3)
        .map(|_| place(&mut pool, &mut device, 3 * PAGE))
        .collect();
    assert_eq!(device.mapped_bytes(), 9 * PAGE);
    pool.release(&blocks[1], 3 * PAGE).unwrap();
    let calls = device.map_calls;
    let again = pool
        .try_reserve(3 * PAGE, 3 * PAGE)
        .expect("the hole fits it exactly");
    assert_eq!(again.offset, blocks[1].offset);
    assert_eq!((device.mapped_bytes(), device.map_calls), (9 * PAGE, calls));
    agrees(&pool, &device);
}

#[test]
fn a_page_shared_by_two_neighbours_stays_mapped_until_both_are_released() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    // 1.5 pages each: the second page is shared.
    let half = PAGE / 2;
    let first = place(&mut pool, &mut device, 3 * half);
    let second = place(&mut pool, &mut device, 3 * half);
    assert_eq!(second.offset, first.offset + 3 * half, "they pack");
    assert_eq!(device.mapped_bytes(), 3 * PAGE);
    pool.release(&first, 3 * half).unwrap();
    assert_eq!(
        pool.release_idle(&mut device, u64::MAX),
        PAGE,
        "only its own page"
    );
    assert!(device.is_mapped(&first, 1), "the shared page stays");
    pool.release(&second, 3 * half).unwrap();
    assert_eq!(pool.release_idle(&mut device, u64::MAX), 2 * PAGE);
    assert_eq!(device.mapped_bytes(), 0);
    agrees(&pool, &device);
}

#[test]
fn idle_pages_are_reused_before_new_ones_are_mapped() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    let big = place(&mut pool, &mut device, 8 * PAGE);
    let live = place(&mut pool, &mut device, PAGE);
    pool.release(&big, 8 * PAGE).unwrap();
    let calls = device.map_calls;
    // Smaller requests take the idle pages without a device call, at the ends of the hole.
    let a = place(&mut pool, &mut device, 3 * PAGE);
    let b = place(&mut pool, &mut device, 5 * PAGE);
    assert_eq!(device.map_calls, calls, "nothing mapped");
    assert_eq!(device.mapped_bytes(), 9 * PAGE);
    assert!(a.offset < 8 * PAGE && b.offset < 8 * PAGE);
    // A request larger than the idle pages maps only what it lacks next to them, in one call.
    pool.release(&b, 5 * PAGE).unwrap();
    pool.release(&live, PAGE).unwrap();
    let c = place(&mut pool, &mut device, 8 * PAGE);
    assert_eq!(c.offset, 3 * PAGE, "over the six idle pages");
    assert_eq!(device.map_calls, calls + 1);
    assert_eq!(device.mapped_bytes(), 11 * PAGE);
    agrees(&pool, &device);
}

#[test]
fn making_room_unmaps_what_is_asked_oldest_first() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    let old = place(&mut pool, &mut device, 8 * PAGE);
    let live = place(&mut pool, &mut device, PAGE);
    let new = place(&mut pool, &mut device, 8 * PAGE);
    pool.release(&old, 8 * PAGE).unwrap();
    pool.release(&new, 8 * PAGE).unwrap();
    assert_eq!(pool.release_idle(&mut device, 3 * PAGE), 3 * PAGE);
    assert_eq!(
        device.mapped_bytes(),
        14 * PAGE,
        "three pages of the oldest run"
    );
    assert!(!device.is_mapped(&old, 0) && device.is_mapped(&old, 3));
    assert_eq!(pool.release_idle(&mut device, 6 * PAGE), 6 * PAGE);
    assert_eq!(
        device.mapped_bytes(),
        8 * PAGE,
        "its five others, then one of the next"
    );
    assert!(device.is_mapped(&live, 0) && !device.is_mapped(&new, 0));
    assert!(device.is_mapped(&new, 1));
    // Released and reused a thousand times over: the runs left behind are dropped.
    for _ in 0..1000 {
        let block = place(&mut pool, &mut device, 4 * PAGE);
        pool.release(&block, 4 * PAGE).unwrap();
    }
    assert!(
        pool.queue.len() <= 4 * 16 + 1024 + 1,
        "{} runs",
        pool.queue.len()
    );
    let held = device.mapped_bytes();
    assert_eq!(pool.cleanup(&mut device), held - PAGE);
    assert_eq!(device.mapped_bytes(), PAGE, "only the live page");
    agrees(&pool, &device);
}

#[test]
fn pages_idle_for_release_after_ticks_go_back_oldest_first() {
    let mut pool = MappedRunsPool::new("test".into(), PAGE, 1024 * PAGE, None, Some(3));
    let mut device = HostPages::default();
    let blocks: Vec<Block> = (0..3)
        .map(|_| place(&mut pool, &mut device, 2 * PAGE))
        .collect();
    pool.release(&blocks[0], 2 * PAGE).unwrap();
    assert_eq!(pool.periodic_cleanup(&mut device, 10), 0, "seen at tick 10");
    pool.release(&blocks[1], 2 * PAGE).unwrap();
    assert_eq!(pool.periodic_cleanup(&mut device, 12), 0, "seen at tick 12");
    assert_eq!(pool.periodic_cleanup(&mut device, 13), 2 * PAGE);
    assert!(!device.is_mapped(&blocks[0], 0) && device.is_mapped(&blocks[1], 0));
    // Taken again before its time: it stays.
    let again = place(&mut pool, &mut device, 2 * PAGE);
    assert_eq!(pool.periodic_cleanup(&mut device, 20), 0);
    assert!(device.is_mapped(&again, 0));
    assert_eq!(
        device.mapped_bytes(),
        4 * PAGE,
        "the third block's and the reused ones"
    );
    agrees(&pool, &device);
}

#[test]
fn a_refused_mapping_is_an_error_that_maps_nothing_and_leaves_the_pool_usable() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    let kept = place(&mut pool, &mut device, 2 * PAGE);
    let hole = place(&mut pool, &mut device, 2 * PAGE);
    let _after = place(&mut pool, &mut device, PAGE);
    pool.release(&hole, 2 * PAGE).unwrap();
    // Three pages: the hole's two are idle, the third is mapped in a run after `_after`... and
    // refused: the request gets the error, and nothing it would have mapped stays.
    device.refuse = true;
    let before = (device.mapped_bytes(), pool.report().clone());
    assert_eq!(
        pool.grow(&mut device, 3 * PAGE, 3 * PAGE),
        Err(AllocError::OutOfMemory)
    );
    assert_eq!((device.mapped_bytes(), pool.report().clone()), before);
    // The pool goes on: the idle hole is still reused, and once the device maps again so is the
    // failed request.
    device.refuse = false;
    let reused = place(&mut pool, &mut device, 2 * PAGE);
    assert_eq!(reused.offset, hole.offset);
    let grown = place(&mut pool, &mut device, 3 * PAGE);
    assert_eq!(device.mapped_bytes(), 8 * PAGE);
    pool.release(&grown, 3 * PAGE).unwrap();
    pool.release(&kept, 2 * PAGE).unwrap();
    agrees(&pool, &device);
}

#[test]
fn a_refusal_partway_unmaps_the_runs_the_request_mapped() {
    /// Refuses the second map call of each request.
    struct SecondRefused(HostPages, u64);
    impl DeviceMemory for SecondRefused {
        fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
            self.0.allocate(size)
        }
        unsafe fn deallocate(&mut self, storage: StorageId) {
            // SAFETY: passed on as received.
            unsafe { self.0.deallocate(storage) }
        }
        fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError> {
            self.0.reserve_addresses(size)
        }
        fn map_pages(
            &mut self,
            storage: StorageId,
            offset: u64,
            len: u64,
        ) -> Result<(), AllocError> {
            self.1 += 1;
            if self.1 == 2 {
                return Err(AllocError::OutOfMemory);
            }
            self.0.map_pages(storage, offset, len)
        }
        unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
            // SAFETY: passed on as received.
            unsafe { self.0.unmap_pages(storage, offset, len) }
        }
        fn trim_pages(&mut self) {}
        unsafe fn free_addresses(&mut self, storage: StorageId) {
            // SAFETY: passed on as received.
            unsafe { self.0.free_addresses(storage) }
        }
    }
    let mut pool = MappedRunsPool::new("test".into(), PAGE, 8 * PAGE, None, None);
    let mut device = SecondRefused(HostPages::default(), 0);
    // A live page in the middle of a free range: a request over the whole range needs two runs.
    let head = place(&mut pool, &mut device.0, 3 * PAGE);
    let middle = place(&mut pool, &mut device.0, PAGE);
    pool.release(&head, 3 * PAGE).unwrap();
    pool.release_idle(&mut device.0, u64::MAX);
    let tail = place(&mut pool, &mut device.0, 4 * PAGE);
    pool.release(&tail, 4 * PAGE).unwrap();
    pool.release_idle(&mut device.0, u64::MAX);
    pool.release(&middle, PAGE).unwrap();
    assert_eq!(device.0.mapped_bytes(), PAGE, "the middle page, idle");
    assert_eq!(
        pool.grow(&mut device, 8 * PAGE, 8 * PAGE),
        Err(AllocError::OutOfMemory)
    );
    assert_eq!(device.0.mapped_bytes(), PAGE, "the first run went back");
    agrees(&pool, &device.0);
    let whole = place(&mut pool, &mut device.0, 8 * PAGE);
    assert_eq!(device.0.mapped_bytes(), 8 * PAGE);
    pool.release(&whole, 8 * PAGE).unwrap();
    assert_eq!(pool.cleanup(&mut device.0), 8 * PAGE);
    assert_eq!(device.0.freed_ranges, 1, "the empty range went back");
    agrees(&pool, &device.0);
}

#[test]
fn split_and_joined_blocks_keep_their_pages_busy_and_a_stale_release_is_refused() {
    let (mut pool, mut device) = (pool(), HostPages::default());
    let block = place(&mut pool, &mut device, 4 * PAGE);
    let tail = pool.split(&block, PAGE + 64).expect("splits");
    let head = Block {
        len: PAGE + 64,
        ..block
    };
    pool.release(&head, PAGE + 64).unwrap();
    assert_eq!(
        pool.release_idle(&mut device, u64::MAX),
        PAGE,
        "the tail keeps page 1"
    );
    assert!(pool.release(&head, PAGE + 64).is_err(), "released twice");
    let again = place(&mut pool, &mut device, PAGE + 64);
    let joined = pool.join(&again, &tail).expect("they meet");
    assert_eq!(joined, block);
    pool.release(&joined, 4 * PAGE).unwrap();
    assert_eq!(pool.cleanup(&mut device), 4 * PAGE);
    assert_eq!(device.mapped_bytes(), 0);
    agrees(&pool, &device);
}

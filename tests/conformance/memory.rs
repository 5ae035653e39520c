//! Conformance cases of memory reuse through the public client: loops that allocate and drop
//! faster than ticks run reserve what is live, not what was ever allocated.

use crate::common::fill_first_cube;
use gpuworld::{Backend, ComputeClient};
use std::collections::VecDeque;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

pub fn a_drop_and_allocate_loop_reserves_what_is_live<B: Backend>(client: ComputeClient<B>) {
    let kept = client.empty(MIB);
    for _ in 0..2000 {
        drop(client.empty(MIB));
    }
    client.sync().unwrap();
    let usage = client.memory_usage();
    assert_eq!(usage.bytes_in_use, MIB);
    assert!(usage.bytes_reserved <= 2 * MIB, "{usage:?}");
    // The same with a kernel using each buffer: its stream reuses the memory behind its work.
    for _ in 0..500 {
        let scratch = client.empty(MIB);
        fill_first_cube(&client, &scratch, 1.0);
    }
    client.sync().unwrap();
    let usage = client.memory_usage();
    assert!(usage.bytes_reserved <= 3 * MIB, "{usage:?}");
    drop(kept);
}

pub fn a_ring_of_live_buffers_stops_growing<B: Backend>(client: ComputeClient<B>) {
    const LIVE: usize = 3000;
    const SIZE: u64 = 16 * KIB;
    let mut ring = VecDeque::with_capacity(LIVE + 1);
    let mut reserved_after_first_ring = 0;
    for i in 0..3 * LIVE {
        let handle = client.empty(SIZE);
        if i % 2 == 0 {
            fill_first_cube(&client, &handle, 1.0);
        }
        ring.push_back(handle);
        if ring.len() > LIVE {
            ring.pop_front();
        }
        if i + 1 == LIVE {
            client.sync().unwrap();
            reserved_after_first_ring = client.memory_usage().bytes_reserved;
        }
    }
    client.sync().unwrap();
    let usage = client.memory_usage();
    let live = LIVE as u64 * SIZE;
    assert_eq!(usage.bytes_in_use, live);
    assert!(
        usage.bytes_reserved as f64 <= 1.05 * live as f64,
        "reserved {} for {live} live",
        usage.bytes_reserved
    );
    assert!(
        usage.bytes_reserved <= reserved_after_first_ring + 2 * MIB,
        "grew from {reserved_after_first_ring} to {}",
        usage.bytes_reserved
    );
}

//! Out of memory on a backend with a capped capacity: the pool cleans up and retries once, then
//! reports `Error::OutOfMemory` with the request and the usage; nothing allocated is lost and the
//! runtime stays usable.

mod common;

use common::bytes_of;
use gpuworld::{ComputeClient, CpuBackend, Driver, Error};

const KIB: usize = 1024;

fn capped(capacity: usize) -> ComputeClient<CpuBackend> {
    ComputeClient::new(
        CpuBackend::with_capacity(Some(capacity as u64)),
        Default::default(),
        Driver::Manual,
    )
}

#[test]
fn cached_free_memory_is_returned_and_the_request_retried_before_failing() {
    let client = capped(64 * KIB);
    let kept = client.create(vec![7; 8 * KIB]);
    {
        let temporary: Vec<_> = (0..4).map(|_| client.create(vec![1; 8 * KIB])).collect();
        client.sync().unwrap();
        drop(temporary);
    }
    client.sync().unwrap();
    client.tick();
    assert_eq!(
        client.memory_usage().bytes_reserved,
        40 * KIB as u64,
        "kept for reuse"
    );
    // 48 KiB does not fit next to the 40 KiB held; it does once the 32 KiB free went back.
    let large = client.create(vec![9; 48 * KIB]);
    assert_eq!(client.read_one(&large).unwrap(), vec![9; 48 * KIB]);
    assert_eq!(client.memory_usage().bytes_reserved, 56 * KIB as u64);
    assert_eq!(client.read_one(&kept).unwrap(), vec![7; 8 * KIB]);
}

#[test]
fn a_request_the_device_cannot_hold_is_out_of_memory_and_loses_nothing() {
    let client = capped(64 * KIB);
    let kept = client.create(bytes_of(&[3.0; 2048]));
    let huge = client.empty(1 << 20);
    let error = client.read_one(&huge).unwrap_err();
    match &error {
        Error::OutOfMemory { requested, usage } => {
            assert_eq!(*requested, 1 << 20);
            assert_eq!(usage.bytes_in_use, 8 * KIB as u64);
            assert_eq!(usage.number_allocs, 1);
        }
        other => panic!("expected out of memory, got {other}"),
    }
    assert!(
        error.to_string().contains("1048576 bytes requested"),
        "{error}"
    );
    assert!(matches!(client.sync(), Err(Error::OutOfMemory { .. })));
    drop(huge);
    // Still usable: what exists is intact and new memory can be had.
    assert_eq!(client.read_one(&kept).unwrap(), bytes_of(&[3.0; 2048]));
    let more = client.create(vec![5; 16 * KIB]);
    assert_eq!(client.read_one(&more).unwrap(), vec![5; 16 * KIB]);
    client.sync().unwrap();
}

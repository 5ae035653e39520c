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
    client.sync().unwrap();
    drop(huge);
    // Still usable: what exists is intact and new memory can be had.
    assert_eq!(client.read_one(&kept).unwrap(), bytes_of(&[3.0; 2048]));
    let more = client.create(vec![5; 16 * KIB]);
    assert_eq!(client.read_one(&more).unwrap(), vec![5; 16 * KIB]);
    client.sync().unwrap();
}

#[test]
fn streams_that_allocate_faster_than_the_device_retires_wait_instead_of_failing() {
    // Room for two 1 MiB buffers; three streams each allocate, use and drop one in turn, never
    // waiting. Memory one stream released reaches another only after its event passed, so an
    // allocation regularly finds none free: it must wait for that memory, not fail.
    const MIB: usize = 1 << 20;
    let client = ComputeClient::new(
        CpuBackend::with_capacity(Some(2 * MIB as u64)),
        Default::default(),
        Driver::DeviceThread,
    );
    let streams: Vec<_> = (0..3)
        .map(|s| client.with_stream(gpuworld::StreamId { value: s }))
        .collect();
    for round in 0..60 {
        for (index, stream) in streams.iter().enumerate() {
            let value = (round * 3 + index) as f32;
            let handle = stream.empty(MIB as u64);
            stream
                .launch(
                    &gpuworld::library::FILL,
                    gpuworld::CubeCount::covering(MIB as u64 / 4, gpuworld::library::LINEAR_CUBE),
                    gpuworld::Bindings::new().buffer(&handle).scalar_f32(value),
                )
                .unwrap();
            if round % 20 == 0 {
                let values: Vec<f32> = stream.read_one_as(&handle).unwrap();
                assert!(values.iter().all(|&v| v == value));
            }
        }
    }
    for stream in &streams {
        stream.sync().unwrap();
    }
    let usage = client.memory_usage();
    assert!(usage.bytes_reserved <= 2 * MIB as u64, "{usage:?}");
}

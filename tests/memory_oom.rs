//! Out of memory on a backend with a capped capacity: the pool cleans up and retries once, then
//! reports `MemoryError::OutOfMemory` with the request and the usage; nothing allocated is lost and
//! the runtime stays usable. The cpu device is capped by default (a share of physical memory), and
//! a request over the device's largest buffer is `MemoryError::BufferTooLarge`, not out of memory.

mod common;

use common::bytes_of;
use gpuworld::error::MemoryError;
use gpuworld::{Backend, ComputeClient, CpuBackend, Driver, Error};

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

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
        Error::Memory(MemoryError::OutOfMemory {
            requested, usage, ..
        }) => {
            assert_eq!(*requested, 1 << 20);
            assert_eq!(usage.bytes_in_use, 8 * KIB as u64);
            assert_eq!(usage.number_allocs, 1);
        }
        other => panic!("expected out of memory, got {other}"),
    }
    assert!(error.to_string().contains("1.00 MiB requested"), "{error}");
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

#[test]
fn allocating_past_a_cpu_limit_is_out_of_memory_in_readable_units_and_the_runtime_stays_usable() {
    let client = capped(MIB);
    let quarter = |value: u8| vec![value; 256 * KIB];
    // Four buffers of a quarter of the limit each fill it.
    let mut held: Vec<_> = (1..=4).map(|v| (v, client.create(quarter(v)))).collect();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_in_use, MIB as u64);
    let one_more = client.create(quarter(5));
    let error = client.read_one(&one_more).unwrap_err();
    match &error {
        Error::Memory(MemoryError::OutOfMemory {
            requested,
            usage,
            capacity,
        }) => {
            assert_eq!(*requested, 256 * KIB as u64);
            assert_eq!(usage.bytes_in_use, MIB as u64);
            assert_eq!(*capacity, Some(MIB as u64));
        }
        other => panic!("expected out of memory, got {other}"),
    }
    let message = error.to_string();
    for part in [
        "out of memory: 256.00 KiB requested with 1.00 MiB in use, 1.00 MiB reserved and 0 B of \
         it cached",
        "of 1.00 MiB device memory",
        "`memory_cleanup`",
        "`page_size`",
        "`memory_limit`",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    // Every use of the failed handle reports it; the stream itself has no fault.
    assert!(
        client
            .read_one(&one_more)
            .is_err_and(|error| error.is_out_of_memory())
    );
    client.sync().unwrap();
    drop(one_more);
    // Two freed quarters stay cached in the pool; half the limit fits only once the pool gave
    // them back to the device and retried.
    let freed: Vec<_> = held.drain(..2).collect();
    drop(freed);
    client.sync().unwrap();
    client.tick();
    assert_eq!(client.memory_usage().bytes_reserved, MIB as u64, "cached");
    let half = client.create(vec![9; 512 * KIB]);
    assert_eq!(client.read_one(&half).unwrap(), vec![9; 512 * KIB]);
    for (value, handle) in &held {
        assert_eq!(client.read_one(handle).unwrap(), quarter(*value), "lost");
    }
    drop(half);
    let small = client.create(vec![6; 4 * KIB]);
    assert_eq!(client.read_one(&small).unwrap(), vec![6; 4 * KIB]);
    client.sync().unwrap();
}

#[test]
#[cfg(target_os = "linux")]
fn the_default_cpu_limit_is_nonzero_and_within_physical_memory() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .expect("a MemTotal line");
    let physical = kib * 1024;
    let limit = CpuBackend::new().properties().memory_bytes;
    assert!(limit > 0);
    assert!(limit <= physical, "{limit} > {physical}");
    assert_eq!(Some(limit), gpuworld_cpu::default_memory_limit());
    assert_eq!(
        gpuworld::cpu_client(Driver::Manual)
            .unwrap()
            .properties()
            .memory_bytes,
        limit,
        "cpu_client without configuration"
    );
}

#[test]
fn a_buffer_over_the_largest_the_cpu_can_hold_is_too_large_and_not_out_of_memory() {
    let client = capped(MIB);
    let kept = client.create(vec![4; 64]);
    // Past the memory limit, but a buffer the host could hold: out of memory.
    let past_limit = client.empty(2 * MIB as u64);
    assert!(
        client
            .read_one(&past_limit)
            .is_err_and(|error| error.is_out_of_memory())
    );
    // Over the largest buffer (`isize::MAX` bytes), whatever memory is free.
    let too_large = client.empty(u64::MAX);
    let error = client.read_one(&too_large).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Memory(MemoryError::BufferTooLarge { requested: u64::MAX, limit })
                if limit >= 1 << 31
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with(
            "buffer too large: 16.00 EiB requested, but the device's largest buffer is 8.00 EiB"
        ),
        "{error}"
    );
    client.sync().unwrap();
    drop((past_limit, too_large));
    assert_eq!(client.read_one(&kept).unwrap(), vec![4; 64]);
}

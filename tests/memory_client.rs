//! Memory through the client: tensors with their layouts and strides, several tensors packed in
//! one allocation (launches see the right offsets), persistent-allocation windows, and no leak:
//! once every handle is dropped and memory_cleanup ran, nothing is in use or reserved.

mod common;

use common::{bytes_of, f32s};
use gpuworld::error::LayoutError;
use gpuworld::{
    AllocationMode, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Error, MemoryConfig,
    RuntimeConfig, StreamId, TensorDesc, TensorLayout, library,
};

fn cpu() -> ComputeClient<CpuBackend> {
    gpuworld::cpu_client(Driver::Manual).unwrap()
}

fn pitched_cpu(row_alignment: u64) -> ComputeClient<CpuBackend> {
    ComputeClient::new(
        CpuBackend::new(),
        RuntimeConfig::default().with_memory(
            MemoryConfig::default().with_tensor_layout(TensorLayout::Pitched { row_alignment }),
        ),
        Driver::Manual,
    )
}

fn matrix(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| i as f32).collect()
}

#[test]
fn a_contiguous_tensor_has_row_major_strides_and_reads_back() {
    let client = cpu();
    let data = bytes_of(&matrix(2, 3));
    let (handle, strides) = client.create_tensor(&data, &[2, 3], 4).unwrap();
    assert_eq!(strides, vec![3, 1]);
    assert_eq!(handle.size(), 24);
    let back = client.read_tensor(&handle, &[2, 3], &strides, 4).unwrap();
    assert_eq!(back, data);
}

#[test]
fn a_pitched_tensor_pads_its_rows_and_reads_back_contiguous() {
    let client = pitched_cpu(64);
    let data = bytes_of(&matrix(3, 5));
    let (handle, strides) = client.create_tensor(&data, &[3, 5], 4).unwrap();
    assert_eq!(strides, vec![16, 1], "20-byte rows start every 64 bytes");
    assert_eq!(handle.size(), 3 * 64);
    let raw = f32s(&client.read_one(&handle).unwrap());
    assert_eq!(
        &raw[16..21],
        &[5.0, 6.0, 7.0, 8.0, 9.0],
        "row 1 starts at element 16"
    );
    assert_eq!(
        client.read_tensor(&handle, &[3, 5], &strides, 4).unwrap(),
        data
    );
    let (empty, empty_strides) = client.empty_tensor(&[2, 5], 4).unwrap();
    assert_eq!((empty.size(), empty_strides), (128, vec![16, 1]));
}

#[test]
fn packed_tensors_sit_at_aligned_offsets_of_one_allocation_and_launches_see_them() {
    let client = cpu();
    let alignment = client.properties().alignment;
    let (a, b) = (bytes_of(&[1.0; 10]), bytes_of(&[2.0; 33]));
    let out = [0u8; 33 * 4];
    let tensors = client
        .create_tensors(&[
            (
                TensorDesc {
                    shape: &[10],
                    elem_size: 4,
                },
                &a[..],
            ),
            (
                TensorDesc {
                    shape: &[33],
                    elem_size: 4,
                },
                &b[..],
            ),
            (
                TensorDesc {
                    shape: &[33],
                    elem_size: 4,
                },
                &out[..],
            ),
        ])
        .unwrap();
    client.sync().unwrap();
    let allocs_before = client.memory_usage().number_allocs;
    assert_eq!(allocs_before, 1, "one allocation holds all three");
    let starts: Vec<u64> = tensors.iter().map(|(h, _)| h.start()).collect();
    assert_eq!(alignment, 64);
    assert_eq!(
        starts,
        vec![0, 64, 256],
        "40 B, then 132 B, each on a 64-byte boundary"
    );
    let (first, second, third) = (&tensors[0].0, &tensors[1].0, &tensors[2].0);
    client
        .launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new().buffer(second).buffer(third).scalar_f32(3.0),
        )
        .unwrap();
    assert_eq!(f32s(&client.read_one(third).unwrap()), vec![6.0; 33]);
    assert_eq!(f32s(&client.read_one(second).unwrap()), vec![2.0; 33]);
    assert_eq!(f32s(&client.read_one(first).unwrap()), vec![1.0; 10]);
}

#[test]
fn bad_tensor_descriptions_are_errors_that_say_what_is_wrong() {
    let client = cpu();
    let error = client.create_tensor(&[0; 20], &[2, 3], 4).unwrap_err();
    assert!(
        matches!(&error, Error::Layout(LayoutError::InvalidTensor { .. }))
            && error.to_string().contains("needs 24 bytes"),
        "{error}"
    );
    let (handle, _) = client.empty_tensor(&[2, 2], 4).unwrap();
    let error = client
        .read_tensor(&handle, &[2, 2], &[4, 1], 4)
        .unwrap_err();
    assert!(error.to_string().contains("span 24 bytes"), "{error}");
    let error = client.read_tensor(&handle, &[2, 2], &[1], 4).unwrap_err();
    assert!(error.to_string().contains("different lengths"), "{error}");
    assert!(client.empty_tensor(&[4], 0).is_err());
}

#[test]
fn persistent_windows_nest_and_put_allocations_in_the_persistent_pool() {
    let client = cpu();
    let persistent_allocs = |client: &ComputeClient<CpuBackend>| {
        client
            .memory_report()
            .last()
            .map_or(0, |report| report.allocs)
    };
    let (weights, scratch, bias) = client.memory_persistent_allocation(7u64, |n| {
        let weights = client.create(bytes_of(&vec![0.5; n as usize]));
        let scratch =
            client.with_allocation_mode(AllocationMode::Auto, (), |()| client.empty(4096));
        (weights, scratch, client.empty(n * 4))
    });
    let outside = client.empty(4096);
    client.sync().unwrap();
    assert_eq!(
        persistent_allocs(&client),
        2,
        "weights and bias, not scratch or outside"
    );
    assert_eq!(f32s(&client.read_one(&weights).unwrap()), vec![0.5; 7]);
    drop((weights, scratch, bias, outside));
    client.sync().unwrap();
    client.tick();
    assert_eq!(client.memory_usage().number_allocs, 0);
    let persistent = client.memory_report().pop().unwrap();
    assert!(
        persistent.bytes_reserved > 0,
        "freed only by cleanup: {persistent:?}"
    );
    client.memory_cleanup();
    client.tick();
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

#[test]
fn a_panicking_task_does_not_leave_its_window_open() {
    let client = cpu();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client.memory_persistent_allocation((), |()| panic!("task failed"))
    }));
    assert!(result.is_err());
    let after = client.empty(100);
    client.sync().unwrap();
    assert_eq!(client.memory_report().last().map(|r| r.allocs), Some(0));
    drop(after);
}

/// Every kind of allocation, then every handle dropped: nothing may stay in use or reserved.
fn leaves_nothing_behind<B: gpuworld::Backend>(client: ComputeClient<B>) {
    {
        let mut handles = Vec::new();
        for i in 0..64u64 {
            handles.push(client.create(vec![i as u8; (i * 997 % 70_000 + 1) as usize]));
        }
        handles.push(client.empty(3 << 20));
        handles.push(client.empty(100 << 20));
        let tensors = client.empty_tensors(&[
            TensorDesc {
                shape: &[17, 9],
                elem_size: 4,
            },
            TensorDesc {
                shape: &[5],
                elem_size: 2,
            },
        ]);
        let persistent = client.memory_persistent_allocation((), |()| client.empty(12_345));
        for handle in handles.iter().step_by(7) {
            common::fill_first_cube(&client, handle, 1.0);
        }
        client.sync().unwrap();
        assert!(client.memory_usage().bytes_in_use > 100 << 20);
        drop((handles, tensors, persistent));
    }
    client.sync().unwrap();
    for _ in 0..4 {
        client.tick();
    }
    client.memory_cleanup();
    client.sync().unwrap();
    let usage = client.memory_usage();
    assert_eq!(
        (usage.bytes_in_use, usage.bytes_reserved),
        (0, 0),
        "{usage:?}"
    );
    assert_eq!(
        (usage.number_allocs, usage.bytes_padding),
        (0, 0),
        "{usage:?}"
    );
}

#[test]
fn nothing_leaks_on_the_cpu_backend() {
    let client = cpu();
    leaves_nothing_behind(client.clone());
    assert_eq!(client.with_runtime(|rt| rt.backend().allocated()), 0);
}

#[test]
fn nothing_leaks_on_the_sim_backend() {
    let client = gpuworld::sim_client(gpuworld::SimConfig::default().with_record(false))
        .expect("the sim opens");
    leaves_nothing_behind(client.clone());
    assert_eq!(client.with_runtime(|rt| rt.backend().allocated()), 0);
}

/// A launch of `FILL` over all of `handle` (floats), long enough on the cpu backend that the
/// device is still at it when the tick that submitted it ends.
fn fill_all<B: gpuworld::Backend>(
    client: &ComputeClient<B>,
    handle: &gpuworld::Handle,
    value: f32,
) {
    let cubes = (handle.size() / 4).div_ceil(256) as u32;
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(cubes),
            Bindings::new().buffer(handle).scalar_f32(value),
        )
        .unwrap();
}

/// Clients of `client`'s runtime on streams 1 and 2.
fn streams_1_and_2<B: gpuworld::Backend>(
    client: &ComputeClient<B>,
) -> (ComputeClient<B>, ComputeClient<B>) {
    let on = |value| client.with_stream(StreamId { value });
    (on(1), on(2))
}

/// Issue 30's leak, first half: memory used on two streams and released while the second still
/// works on it is pinned, in the tick that submits that work, behind events not passed yet. The
/// same tick's sync waits for the work; when it returns, the memory is free, with no other tick
/// (a manual driver's host may never run one). It used to wait for the next tick.
#[test]
fn memory_released_while_its_last_use_runs_is_free_when_that_streams_sync_returns() {
    let client = cpu();
    let (a, b) = streams_1_and_2(&client);
    let kept = a.empty(64);
    for round in 0..5 {
        let big = b.empty(64 << 20);
        fill_all(&b, &big, 1.0);
        b.sync().unwrap();
        // A waits on B's fill, then fills for some milliseconds; `big` is dropped before A's tick.
        fill_all(&a, &big, round as f32);
        drop(big);
        a.sync().unwrap();
        let usage = client.memory_usage();
        assert_eq!(
            (usage.number_allocs, usage.bytes_in_use),
            (1, 64),
            "round {round}: only `kept` is in use once A's sync returned: {usage:?}\n{}",
            client.snapshot()
        );
    }
    drop(kept);
}

/// Issue 30's leak, second half: a binding that one stream wrote and another read is pinned
/// until the reader's work passed. Once both streams are synced it is free, with no other tick.
/// It used to wait for an event of a stream of the runtime's own that no sync covered, and with
/// it every handle released beside it (the 28–32 allocations of the issue).
#[test]
fn a_binding_shared_across_streams_is_free_once_both_streams_are_synced() {
    let client = cpu();
    let (a, b) = streams_1_and_2(&client);
    for round in 0..5 {
        let shared = a.empty(4 << 20);
        fill_all(&a, &shared, 2.0);
        let out = b.empty(4 << 20);
        // B reads what A wrote: B waits on A, and `shared` is pinned behind B's copy.
        b.launch(
            &library::COPY,
            CubeCount::new_1d(((4 << 20) / 4 / 256) as u32),
            Bindings::new().buffer(&shared).buffer(&out),
        )
        .unwrap();
        let others: Vec<_> = (0..8).map(|i| a.create(vec![i; 100])).collect();
        drop((shared, others));
        a.sync().unwrap();
        b.sync().unwrap();
        let usage = client.memory_usage();
        assert_eq!(
            (usage.number_allocs, usage.bytes_in_use),
            (1, 4 << 20),
            "round {round}: only `out` is in use once both streams are synced: {usage:?}\n{}",
            client.snapshot()
        );
        assert_eq!(f32s(&b.read_one(&out).unwrap())[..4], [2.0; 4]);
    }
}

/// On unix the cpu backend maps host pages under reserved addresses, as CUDA maps device pages:
/// the default ladder places a request over a page in its mapped pool, which holds whole pages
/// under live allocations only (a hole costs at most the pages at its ends), and their bytes read
/// back across pages and after a neighbour's release.
#[test]
#[cfg(unix)]
fn the_cpu_backend_maps_host_pages_under_requests_over_a_page() {
    let client = cpu();
    let page = client
        .properties()
        .page_mapping
        .expect("unix maps host pages");
    let bytes = |seed: u64| -> Vec<u8> {
        (0..3 * page)
            .map(|i| ((i * 7 + seed) % 251) as u8)
            .collect()
    };
    let mapped = || {
        (client.memory_report().into_iter())
            .find(|pool| pool.name.contains("mapped"))
            .expect("a mapped pool")
    };
    let mut handles: Vec<_> = (0..3).map(|seed| client.create(bytes(seed))).collect();
    client.sync().unwrap();
    assert_eq!((mapped().allocs, mapped().bytes_reserved), (3, 9 * page));
    // The middle one's pages are reused whole by a request of its size: nothing more is mapped.
    drop(handles.remove(1));
    handles.insert(1, client.create(bytes(5)));
    client.sync().unwrap();
    assert_eq!((mapped().allocs, mapped().bytes_reserved), (3, 9 * page));
    for (handle, seed) in handles.iter().zip([0, 5, 2]) {
        assert_eq!(&*client.read_one(handle).unwrap(), &bytes(seed)[..]);
    }
    drop(handles);
    client.sync().unwrap();
    client.memory_cleanup();
    client.sync().unwrap();
    assert_eq!(mapped().bytes_reserved, 0, "every page unmapped");
    assert_eq!(client.with_runtime(|rt| rt.backend().allocated()), 0);
}

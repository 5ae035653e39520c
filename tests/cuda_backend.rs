//! The cuda backend beyond the conformance suite: a clear error without a driver, compile errors
//! with NVRTC's log, the disk cache of compiled kernels, pinned staging round trips and reuse, many
//! streams at once, device-to-device copies and device timing. Each test that needs a device is
//! reported ignored without a CUDA driver, unless `GPUWORLD_REQUIRE_CUDA=1`.

mod common;

use common::{Skip, bytes_of, cuda_backend_with, cuda_client_or_skip, cuda_required, f32s};
use gpuworld::error::{DeviceError, ExecutionError};
use gpuworld::kernel::{Param, Signature};
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, CudaBackend, CudaConfig, CudaSource, Driver,
    Error, ExecutionMode, KernelDef, RuntimeConfig, StreamId, library,
};
use gpuworld_systems::backend::{Completion, DeviceTiming, LaunchCount, Memory, Queue, Region};
use std::time::{Duration, Instant};

test_main![
    without_a_driver_new_returns_backend_unavailable_with_a_reason,
    availability_agrees_with_new,
    a_compile_error_is_reported_with_the_nvrtc_log_and_the_runtime_stays_usable,
    a_second_backend_loads_the_kernel_from_the_disk_cache,
    uploads_and_readbacks_through_pinned_staging_round_trip,
    a_read_loop_reuses_one_pinned_buffer_and_small_reads_stay_pinned,
    small_reads_give_their_bytes_at_every_size_offset_and_stream,
    reserved_staging_is_page_locked_and_goes_back_to_the_pool,
    many_streams_run_independent_work_and_share_results,
    device_elapsed_measures_the_work_between_two_marks,
    a_dynamic_count_larger_than_the_fixed_grid_covers_every_cube,
    two_marks_time_the_work_between_them_on_the_device,
    copies_within_and_between_buffers_keep_stream_order,
];

/// A kernel whose CUDA source does not compile.
static BROKEN: KernelDef = KernelDef {
    id: "test.cuda.broken",
    name: "broken",
    signature: Signature {
        buffers: &[Param::f32("out")],
        scalars: &[],
        cube_dim: [32, 1, 1],
    },
    sources: &[&CudaSource(
        r#"
extern "C" __global__ void broken(GW_PARAMS) {
    GW_FOR_EACH_CUBE { out[0] = gpuworld_this_name_is_undefined; }
}
"#,
    )],
};

/// Spins each cube for `cycles` clock cycles, then marks its word of `marks`: busy work of a
/// known length.
static SPIN: KernelDef = KernelDef {
    id: "test.cuda.spin",
    name: "spin",
    signature: Signature {
        buffers: &[Param::u32("marks")],
        scalars: &[Param::u32("cycles")],
        cube_dim: [32, 1, 1],
    },
    sources: &[&CudaSource(
        r#"
extern "C" __global__ void spin(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const long long start = clock64();
        while (clock64() - start < (long long)cycles) {}
        if (threadIdx.x == 0 && GW_IN_BOUNDS(GW_CUBE_INDEX, marks_len)) marks[GW_CUBE_INDEX] = 1u;
    }
}
"#,
    )],
};

/// A directory of its own under the system's temp dir.
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("gpuworld-{name}-{}-{nanos}", std::process::id()))
}

fn without_a_driver_new_returns_backend_unavailable_with_a_reason() {
    match CudaBackend::new(CudaConfig::default()) {
        Ok(backend) => {
            assert!(!backend.properties().name.is_empty());
            assert!(backend.properties().memory_bytes > 0);
        }
        Err(Error::Device(DeviceError::BackendUnavailable { backend, reason })) => {
            assert!(
                !cuda_required(),
                "GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}"
            );
            assert_eq!(backend, "cuda");
            assert!(!reason.is_empty());
        }
        Err(other) => panic!("expected BackendUnavailable, got {other}"),
    }
}

fn availability_agrees_with_new() {
    let available = gpuworld::cuda_availability();
    let opened = CudaBackend::new(CudaConfig::default());
    assert_eq!(available.is_ok(), opened.is_ok(), "{available:?}");
}

fn a_compile_error_is_reported_with_the_nvrtc_log_and_the_runtime_stays_usable() -> Result<(), Skip>
{
    let client = cuda_client_or_skip()?;
    let out = client.empty(128);
    client
        .launch(&BROKEN, CubeCount::new_1d(1), Bindings::new().buffer(&out))
        .unwrap();
    match client.sync() {
        Err(Error::Execution(ExecutionError::Compile { kernel, log })) => {
            assert_eq!(kernel, "broken");
            assert!(
                log.contains("gpuworld_this_name_is_undefined"),
                "the log names the undefined identifier: {log}"
            );
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&out).scalar_f32(2.5),
        )
        .unwrap();
    assert_eq!(f32s(&client.read_one(&out).unwrap()), vec![2.5; 32]);
    Ok(())
}

fn a_second_backend_loads_the_kernel_from_the_disk_cache() -> Result<(), Skip> {
    let dir = fresh_dir("cuda-cache");
    let config = CudaConfig::default().with_cache_dir(Some(dir.clone()));
    let fill_once = |backend: CudaBackend| {
        let client = ComputeClient::new(backend, RuntimeConfig::default(), Driver::Manual);
        let out = client.empty(1024);
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&out).scalar_f32(1.0),
            )
            .unwrap();
        assert_eq!(f32s(&client.read_one(&out).unwrap()), vec![1.0; 256]);
        client.with_runtime(|rt| rt.backend().compile_stats())
    };
    let first = cuda_backend_with(config.clone())?;
    let cold = fill_once(first);
    assert_eq!((cold.compiled, cold.disk_hits), (1, 0), "{cold:?}");
    let second = cuda_backend_with(config)?;
    let warm = fill_once(second);
    assert_eq!((warm.compiled, warm.disk_hits), (0, 1), "{warm:?}");
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

fn uploads_and_readbacks_through_pinned_staging_round_trip() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    for len in [1usize, 3, 4096, 4097, 1 << 20, (64 << 20) + 12] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        let handle = client.create_from_slice(&data);
        assert_eq!(client.read_one(&handle).unwrap(), data, "{len} bytes");
        let tail = handle.clone().offset_start(len as u64 / 2);
        let patch = vec![0xa5u8; len - len / 2];
        client.write(&tail, &patch).unwrap();
        let back = client.read_one(&handle).unwrap();
        assert_eq!(&back[..len / 2], &data[..len / 2]);
        assert_eq!(&back[len / 2..], &patch[..]);
    }
    let pinned = client.with_runtime(|rt| rt.backend().pinned_bytes());
    assert!(pinned > 0, "the copies went through pinned staging");
    assert!(pinned <= 4 << 30, "pinned staging stays bounded: {pinned}");
    Ok(())
}

fn a_read_loop_reuses_one_pinned_buffer_and_small_reads_stay_pinned() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let pinned =
        |client: &ComputeClient<CudaBackend>| client.with_runtime(|rt| rt.backend().pinned_bytes());
    let len = (64 << 20) + 5;
    let data: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
    let handle = client.create_from_slice(&data);
    let first = client.read_one(&handle).unwrap();
    assert!(first.is_page_locked(), "reads hand over the pinned buffer");
    assert_eq!(first, data);
    let address = first.as_ptr();
    drop(first);
    let held = pinned(&client);
    for _ in 0..5 {
        let again = client.read_one(&handle).unwrap();
        assert_eq!(
            again.as_ptr(),
            address,
            "the same pinned buffer serves every round"
        );
        assert_eq!(again[len - 1], data[len - 1]);
    }
    assert_eq!(
        pinned(&client),
        held,
        "no page-locked memory allocated after the first read"
    );
    let small = client.create_from_slice(&[1, 2, 3, 4]);
    for _ in 0..100 {
        let back = client.read_one(&small).unwrap();
        assert!(back.is_page_locked());
        assert_eq!(back, [1u8, 2, 3, 4]);
    }
    Ok(())
}

/// Small reads, the round trip's kind: at every length around the word and warp edges, from
/// aligned and unaligned offsets, in one call with several bindings, on several streams, and with
/// more work queued behind a read (whose flag then is not its stream's last work), each read gives
/// the bytes as they were when it was queued.
fn small_reads_give_their_bytes_at_every_size_offset_and_stream() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let len = 12 << 10;
    let data: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
    let handle = client.create_from_slice(&data);
    let lens = [
        1u64, 2, 3, 4, 5, 7, 8, 31, 32, 33, 127, 128, 129, 1023, 1024, 1025, 4095, 4096,
    ];
    for read_len in lens.into_iter().chain([4097, 8192]) {
        for offset in [0u64, 1, 2, 3, 4, 256, 257, 1024 + 3] {
            let trim = len as u64 - offset - read_len;
            let view = handle.clone().offset_start(offset).offset_end(trim);
            let got = client.read_one(&view).unwrap();
            assert!(got.is_page_locked(), "{read_len} B at {offset}");
            let want = &data[offset as usize..(offset + read_len) as usize];
            assert_eq!(&got[..], want, "{read_len} B at {offset}");
        }
    }
    // Several small reads in one call, then work behind a read on the same stream: each read
    // gives the bytes as they were when it was queued.
    let word = client.create_from_slice(&[9u8; 4]);
    let bindings: Vec<_> = (0..8u64)
        .map(|i| {
            handle
                .clone()
                .offset_start(i * 5)
                .offset_end(len as u64 - i * 5 - 3)
                .binding()
        })
        .chain([word.binding()])
        .collect();
    let many = client.read(&bindings).unwrap();
    for (i, bytes) in many.iter().take(8).enumerate() {
        assert_eq!(&bytes[..], &data[i * 5..i * 5 + 3], "binding {i}");
    }
    assert_eq!(&many[8][..], &[9u8; 4]);
    let before = client.read_async(&[word.binding()]);
    client.write(&word, &[7u8; 4]).unwrap();
    let after = client.read_one(&word).unwrap();
    assert_eq!(&after[..], &[7u8; 4]);
    let before = futures_executor::block_on(before).unwrap();
    assert_eq!(
        &before[0][..],
        &[9u8; 4],
        "the read queued before the write"
    );
    // Reads on other streams, each its own flag.
    for s in 1..4u64 {
        let stream = client.with_stream(StreamId { value: s });
        let mine = stream.create_from_slice(&[s as u8; 12]);
        assert_eq!(&stream.read_one(&mine).unwrap()[..], &[s as u8; 12]);
    }
    Ok(())
}

fn reserved_staging_is_page_locked_and_goes_back_to_the_pool() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let pinned =
        |client: &ComputeClient<CudaBackend>| client.with_runtime(|rt| rt.backend().pinned_bytes());
    let len = 8 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
    let mut staging = client.reserve_staging(&[len]);
    assert!(staging[0].is_page_locked(), "{:?}", staging[0]);
    staging[0].copy_from_slice(&data);
    let handle = client.create(staging.pop().unwrap());
    let back = client.read(&[handle.binding()]).unwrap();
    assert!(back[0].is_page_locked(), "readbacks land in pinned memory");
    assert_eq!(back[0], data);
    // The readback may land in the upload's own buffer, back in the pool once its copy passed.
    let held = pinned(&client);
    assert!(held >= len, "source and readback are pinned: {held}");
    drop(back);
    // Once dropped, the same buffers serve the next rounds: at most one upload's and one
    // readback's buffer are ever needed at once (whether the first upload's buffer was back in
    // the pool before the first readback took one depends on which thread ticked the create).
    for _ in 0..4 {
        let mut again = client.reserve_staging(&[len]);
        again[0].copy_from_slice(&data);
        client.write_bytes(&handle, again.pop().unwrap()).unwrap();
        let back = client.read(&[handle.binding()]).unwrap();
        assert_eq!(back[0], data);
    }
    let after = pinned(&client);
    assert!(
        after <= held.max(2 * len),
        "pinned staging is reused: {after} bytes pinned after the rounds, {held} before"
    );
    let slice = client.create_from_slice_pinned(&data[..1000]);
    assert_eq!(client.read_one(&slice).unwrap(), data[..1000].to_vec());
    Ok(())
}

fn many_streams_run_independent_work_and_share_results() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let len = 1 << 16;
    let results: Vec<gpuworld::Handle> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|s| {
                let client = client.clone();
                scope.spawn(move || {
                    let mut a = client.create(bytes_of(&vec![1.0; len]));
                    let mut b = client.empty(len as u64 * 4);
                    for _ in 0..(s + 4) {
                        client
                            .launch(
                                &library::SCALE,
                                CubeCount::covering(len as u64, library::LINEAR_CUBE),
                                Bindings::new().buffer(&a).buffer(&b).scalar_f32(2.0),
                            )
                            .unwrap();
                        std::mem::swap(&mut a, &mut b);
                    }
                    a
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    // Read each stream's result from another stream: the runtime makes it wait for the writer.
    let reader = client.with_stream(StreamId::current());
    for (s, handle) in results.iter().enumerate() {
        let expected = 2f32.powi(s as i32 + 4);
        assert_eq!(f32s(&reader.read_one(handle).unwrap()), vec![expected; len]);
    }
    Ok(())
}

fn device_elapsed_measures_the_work_between_two_marks() -> Result<(), Skip> {
    let mut backend = cuda_backend_with(CudaConfig::default())?;
    let stream = backend.create_stream(StreamId::current());
    let storage = backend.allocate(4 * 132).unwrap();
    let region = Region {
        storage,
        offset: 0,
        size: 4 * 132,
    };
    let start = backend.mark(stream);
    // SAFETY: the region is the whole of a buffer just allocated; the launch is checked.
    unsafe {
        backend.launch(
            stream,
            &SPIN,
            LaunchCount::Static([132, 1, 1]),
            &[region],
            &[20_000_000],
            ExecutionMode::Checked,
        );
    }
    let end = backend.mark(stream);
    let began = Instant::now();
    while !backend.event_done(end) {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the spin never finished"
        );
        backend.wait_for_progress(Duration::from_millis(1), None);
        backend.poll(0);
    }
    assert!(backend.take_fault(stream).is_none());
    let elapsed = backend
        .device_elapsed(start, end)
        .expect("both events completed recently");
    // 20M cycles at no more than ~2.1 GHz is at least 9 ms.
    assert!(elapsed >= Duration::from_millis(5), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    // SAFETY: the launch that used the buffer finished (its end mark passed).
    unsafe { backend.deallocate(storage) };
    Ok(())
}

fn a_dynamic_count_larger_than_the_fixed_grid_covers_every_cube() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let cubes = 5000u32;
    let out = client.empty(u64::from(cubes) * 256 * 4);
    let count = client.create(bytemuck::cast_slice(&[cubes, 1, 1]).to_vec());
    client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(count.binding()),
            Bindings::new().buffer(&out).scalar_f32(4.0),
        )
        .unwrap();
    let values = f32s(&client.read_one(&out).unwrap());
    assert!(values.iter().all(|v| *v == 4.0));
    Ok(())
}

fn two_marks_time_the_work_between_them_on_the_device() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let out = client.empty(4 * 132);
    let start = client.mark().unwrap();
    client
        .launch(
            &SPIN,
            CubeCount::new_1d(132),
            Bindings::new().buffer(&out).scalar_u32(20_000_000),
        )
        .unwrap();
    let end = client.mark().unwrap();
    client.sync().unwrap();
    let elapsed = client
        .device_elapsed(start, end)
        .expect("CUDA measures the device time between two marks");
    // 20M cycles at no more than ~2.1 GHz is at least 9 ms.
    assert!(elapsed >= Duration::from_millis(5), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    Ok(())
}

/// `cuMemcpyDtoDAsync` on the stream, within one buffer and between two.
fn copies_within_and_between_buffers_keep_stream_order() -> Result<(), Skip> {
    let mut backend = cuda_backend_with(CudaConfig::default())?;
    common::copies_within_and_between_buffers_keep_stream_order(&mut backend);
    Ok(())
}

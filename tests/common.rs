//! Shared pieces of the integration tests: polling a future once, f32 conversions, and a wgpu
//! or CUDA device when this machine has one (a [`Skip`] for the [`harness`] when it has none).

#![allow(dead_code)]

// A path from `tests/`: this file is a test crate's root too (`cargo test --test common`).
#[path = "common/halo.rs"]
pub mod halo;
#[path = "common/harness.rs"]
pub mod harness;
#[cfg(feature = "cuda")]
#[path = "common/two_gpus.rs"]
pub mod two_gpus;

pub use harness::Skip;

/// How long any one call may take before a test calls it a hang.
pub const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `call` on another thread; its result, or a panic naming `what` after [`LIMIT`] (the
/// thread is left behind: a hang fails the test instead of the test hanging).
pub fn within<T: Send + 'static>(what: &str, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(call());
    });
    receiver
        .recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{what} did not return within {LIMIT:?}: a hang"))
}

use gpuworld::error::BindingError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A future polled by hand, one tick at a time, as a game loop would.
pub struct Pending<T>(Pin<Box<dyn Future<Output = T> + Send>>);

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pending").finish_non_exhaustive()
    }
}

impl<T> Pending<T> {
    /// Wraps a future.
    pub fn new(future: impl Future<Output = T> + Send + 'static) -> Self {
        Pending(Box::pin(future))
    }

    /// Polls once: `Some` when ready.
    pub fn poll(&mut self) -> Option<T> {
        match self
            .0
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(value) => Some(value),
            Poll::Pending => None,
        }
    }
}

/// The bytes of `values`.
pub fn bytes_of(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// `bytes` as `f32` values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Whether a missing wgpu adapter must fail the test (CI sets `GPUWORLD_REQUIRE_WGPU=1`), as the
/// testing kit decides it.
#[cfg(feature = "wgpu")]
pub fn wgpu_required() -> bool {
    gpuworld::testing::TestBackend::Wgpu.required()
}

/// A wgpu backend on the default adapter; a [`Skip`] when there is none, unless
/// `GPUWORLD_REQUIRE_WGPU=1`, which makes a missing adapter a failure.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend_or_skip() -> Result<gpuworld::WgpuBackend, Skip> {
    wgpu_backend_with(gpuworld::WgpuConfig::default())
}

/// Like [`wgpu_backend_or_skip`], with `config`.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend_with(config: gpuworld::WgpuConfig) -> Result<gpuworld::WgpuBackend, Skip> {
    match gpuworld::WgpuBackend::new(config) {
        Ok(backend) => Ok(backend),
        Err(error) if wgpu_required() => {
            panic!("GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}")
        }
        Err(error) => Err(no_wgpu_adapter(error)),
    }
}

/// A client over [`wgpu_backend_with`]'s backend, driven by `driver`; a [`Skip`] as it is.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_with(
    config: gpuworld::WgpuConfig,
    driver: gpuworld::Driver,
) -> Result<gpuworld::ComputeClient<gpuworld::WgpuBackend>, Skip> {
    let backend = wgpu_backend_with(config)?;
    Ok(gpuworld::ComputeClient::new(
        backend,
        gpuworld::RuntimeConfig::default(),
        driver,
    ))
}

/// A client from `gpuworld::wgpu_client`, or a [`Skip`] as [`wgpu_backend_or_skip`] decides.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_or_skip() -> Result<gpuworld::ComputeClient<gpuworld::WgpuBackend>, Skip> {
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => Ok(client),
        Err(error) if wgpu_required() => {
            panic!("GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}")
        }
        Err(error) => Err(no_wgpu_adapter(error)),
    }
}

/// The skip of a test that found no wgpu adapter.
#[cfg(feature = "wgpu")]
pub fn no_wgpu_adapter(error: impl std::fmt::Display) -> Skip {
    Skip(format!("no wgpu adapter: {error}"))
}

/// The skip of a test that found no CUDA driver.
#[cfg(feature = "cuda")]
pub fn no_cuda_driver(error: impl std::fmt::Display) -> Skip {
    Skip(format!("no CUDA driver: {error}"))
}

/// Whether a missing CUDA driver must fail the test (the GPU machine sets
/// `GPUWORLD_REQUIRE_CUDA=1`).
#[cfg(feature = "cuda")]
pub fn cuda_required() -> bool {
    gpuworld::testing::TestBackend::Cuda.required()
}

/// A CUDA backend on device 0 with `config`; a [`Skip`] when there is no driver,
/// unless `GPUWORLD_REQUIRE_CUDA=1`, which makes a missing driver a failure.
#[cfg(feature = "cuda")]
pub fn cuda_backend_with(config: gpuworld::CudaConfig) -> Result<gpuworld::CudaBackend, Skip> {
    match gpuworld::CudaBackend::new(config) {
        Ok(backend) => Ok(backend),
        Err(error) if cuda_required() => {
            panic!("GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {error}")
        }
        Err(error) => Err(no_cuda_driver(error)),
    }
}

/// Like [`cuda_backend_with`], with the default configuration.
#[cfg(feature = "cuda")]
pub fn cuda_backend_or_skip() -> Result<gpuworld::CudaBackend, Skip> {
    cuda_backend_with(gpuworld::CudaConfig::default())
}

/// A client from `gpuworld::cuda_client`, or a [`Skip`] as [`cuda_backend_with`] decides.
#[cfg(feature = "cuda")]
pub fn cuda_client_or_skip() -> Result<gpuworld::ComputeClient<gpuworld::CudaBackend>, Skip> {
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => Ok(client),
        Err(error) if cuda_required() => {
            panic!("GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {error}")
        }
        Err(error) => Err(no_cuda_driver(error)),
    }
}

/// Clients of CUDA devices `0..n`, one each; a [`Skip`] when there is no driver
/// or fewer than `n` devices, unless `GPUWORLD_REQUIRE_CUDA=1` (no driver) or
/// `GPUWORLD_REQUIRE_GPUS` names `n` or more (too few devices), which make it a failure.
#[cfg(feature = "cuda")]
pub fn cuda_clients_or_skip(
    n: usize,
) -> Result<Vec<gpuworld::ComputeClient<gpuworld::CudaBackend>>, Skip> {
    let count = match gpuworld_cuda::device_count() {
        Ok(count) => count,
        Err(error) if cuda_required() => {
            panic!("GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {error}")
        }
        Err(error) => return Err(no_cuda_driver(error)),
    };
    if count < n {
        let required = std::env::var("GPUWORLD_REQUIRE_GPUS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        assert!(
            required < n,
            "GPUWORLD_REQUIRE_GPUS={required} but the driver sees {count} device(s)"
        );
        return Err(Skip(format!(
            "{n} CUDA devices needed, the driver sees {count}"
        )));
    }
    let clients = (0..n)
        .map(|device| {
            gpuworld::cuda_client(gpuworld::CudaConfig::default().with_device(device))
                .unwrap_or_else(|error| {
                    panic!("cuda:{device} is listed but does not open: {error}")
                })
        })
        .collect();
    Ok(clients)
}

/// Polls `backend` until `done` holds, ticking its poll so that the sim, whose work completes
/// some ticks after submission, runs too.
pub fn poll_until<B: gpuworld::Backend>(backend: &mut B, mut done: impl FnMut(&mut B) -> bool) {
    let began = std::time::Instant::now();
    let mut tick = 0;
    while !done(backend) {
        assert!(began.elapsed() < LIMIT, "the device made no progress");
        tick += 1;
        backend.poll(tick);
        if !done(backend) {
            backend.wait_for_progress(std::time::Duration::from_millis(1), None);
        }
    }
}

/// The bytes of readback `ticket` of `backend`, once they arrived (after its stream's flush).
pub fn wait_for_read<B: gpuworld::Backend>(
    backend: &mut B,
    ticket: gpuworld_systems::backend::ReadTicket,
) -> Vec<u8> {
    let mut bytes = None;
    poll_until(backend, |backend| {
        bytes = bytes.take().or_else(|| backend.take_read(ticket));
        bytes.is_some()
    });
    bytes
        .map(|bytes| bytes.to_vec())
        .expect("poll_until returns once the bytes arrived")
}

/// `Queue::copy` on `backend`, called directly: a copy within one buffer and one to another
/// buffer, at offsets that are not multiples of 256 and a size that is not a power of two, each
/// sees the work queued before it and none after; a copy between overlapping ranges faults the
/// stream.
pub fn copies_within_and_between_buffers_keep_stream_order<B: gpuworld::Backend>(backend: &mut B) {
    use gpuworld_systems::backend::Region;
    const SIZE: u64 = 1024;
    const LEN: u64 = 300;
    let stream = backend.create_stream(gpuworld::StreamId::current());
    let (a, b) = (
        backend.allocate(SIZE).expect("a test buffer"),
        backend.allocate(SIZE).expect("a test buffer"),
    );
    let whole = |storage| Region {
        storage,
        offset: 0,
        size: SIZE,
    };
    let at = |storage, offset| Region {
        storage,
        offset,
        size: LEN,
    };
    let (src, within, between) = (at(a, 260), at(a, 580), at(b, 36));
    let first: Vec<u8> = (0..LEN).map(|i| (i * 7 + 1) as u8).collect();
    let second: Vec<u8> = (0..LEN).map(|i| (i * 13 + 5) as u8).collect();

    // Device memory starts as anything (CUDA does not clear it): zeros first.
    backend.write(stream, whole(a), vec![0; SIZE as usize].into());
    backend.write(stream, whole(b), vec![0; SIZE as usize].into());
    backend.write(stream, src, first.clone().into());
    backend.copy(stream, src, within);
    backend.copy(stream, within, between);
    backend.write(stream, src, second.clone().into());
    let (read_a, read_b) = (
        backend.read(stream, whole(a)),
        backend.read(stream, whole(b)),
    );
    backend.flush(stream);
    let (read_a, read_b) = (
        wait_for_read(backend, read_a),
        wait_for_read(backend, read_b),
    );
    assert!(backend.take_fault(stream).is_none(), "the copies faulted");

    let range = |region: Region| region.offset as usize..(region.offset + LEN) as usize;
    let mut expected_a = vec![0u8; SIZE as usize];
    expected_a[range(src)].copy_from_slice(&second);
    expected_a[range(within)].copy_from_slice(&first);
    let mut expected_b = vec![0u8; SIZE as usize];
    expected_b[range(between)].copy_from_slice(&first);
    assert_eq!(read_a, expected_a, "the buffer copied within");
    assert_eq!(read_b, expected_b, "the buffer copied to");

    let overlapping = Region {
        offset: src.offset + 4,
        ..src
    };
    backend.copy(stream, src, overlapping);
    let event = backend.flush(stream);
    poll_until(backend, |backend| backend.event_done(event));
    let fault = backend.take_fault(stream).map(|error| error.to_string());
    assert!(
        fault.as_deref().is_some_and(|f| f.contains("overlapping")),
        "{fault:?}"
    );
    // SAFETY: every operation on the buffers completed (the last event passed).
    unsafe {
        backend.deallocate(a);
        backend.deallocate(b);
    }
}

/// A small use of `handle` on the client's stream: one cube of `FILL` (its first 256 floats;
/// a handle of any size, bound as its whole words).
pub fn fill_first_cube<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    handle: &gpuworld::Handle,
    value: f32,
) {
    let words = handle.clone().offset_end(handle.size() % 4);
    client
        .launch(
            &gpuworld::library::FILL,
            gpuworld::CubeCount::new_1d(1),
            gpuworld::Bindings::new().buffer(&words).scalar_f32(value),
        )
        .unwrap();
}

/// One cube of `SCALE` from `x` into `out` by `factor` (their first 256 floats), on the client's
/// stream.
pub fn scale_first_cube<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    x: &gpuworld::Handle,
    out: &gpuworld::Handle,
    factor: f32,
) {
    client
        .launch(
            &gpuworld::library::SCALE,
            gpuworld::CubeCount::new_1d(1),
            gpuworld::Bindings::new()
                .buffer(x)
                .buffer(out)
                .scalar_f32(factor),
        )
        .unwrap();
}

/// A backend suite, and the `main` of its `harness = false` test binary: one module per backend,
/// holding one test per case (named `<backend>::<case>`), each of which makes a client with the
/// backend's expression and hands it to `crate::<module>::<case>`. A backend marked `optional`
/// gives a `Result<_, Skip>` (a [`Skip`], for no device on this machine, reports the case
/// ignored); attributes such as `#[cfg(feature = "wgpu")]` apply to a backend's module.
///
/// ```ignore
/// backend_suite! {
///     cases: [cases::fill_writes_every_element, memory::a_ring_of_live_buffers_stops_growing];
///     cpu: gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
///     #[cfg(feature = "wgpu")]
///     wgpu: optional crate::common::wgpu_client_or_skip();
/// }
/// ```
#[macro_export]
macro_rules! backend_suite {
    (cases: $cases:tt; $($rest:tt)*) => {
        $crate::backend_suite!(@backends $cases; []; $($rest)*);
    };
    (@backends $cases:tt; [$(($(#[$attr:meta])* $backend:ident))*];) => {
        fn main() -> std::process::ExitCode {
            let mut trials = Vec::new();
            $(
                $(#[$attr])*
                trials.extend($backend::trials());
            )*
            $crate::common::harness::run(trials)
        }
    };
    (@backends $cases:tt; [$($added:tt)*];
        $(#[$attr:meta])* $backend:ident: optional $make:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $crate::backend_suite!(@module $backend, $make, $cases);
        $crate::backend_suite!(@backends $cases;
            [$($added)* ($(#[$attr])* $backend)]; $($rest)*);
    };
    (@backends $cases:tt; [$($added:tt)*];
        $(#[$attr:meta])* $backend:ident: $make:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $crate::backend_suite!(@module $backend, Ok::<_, $crate::common::Skip>($make), $cases);
        $crate::backend_suite!(@backends $cases;
            [$($added)* ($(#[$attr])* $backend)]; $($rest)*);
    };
    (@module $backend:ident, $make:expr, [$($module:ident :: $case:ident),* $(,)?]) => {
        mod $backend {
            $(
                fn $case() -> Result<(), $crate::common::Skip> {
                    $crate::$module::$case($make?);
                    Ok(())
                }
            )*

            /// This backend's cases, as tests.
            pub fn trials() -> Vec<$crate::common::harness::Trial> {
                vec![$(
                    $crate::common::harness::trial(
                        concat!(stringify!($backend), "::", stringify!($case)),
                        $case,
                    )
                ),*]
            }
        }
    };
}

/// A blocking tuner that benchmarks each candidate on one warm-up run and three samples, with its
/// cache where `cache` says: enough to pick a winner in a test.
pub fn quick_tuner<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    cache: gpuworld::tune::CacheLocation,
) -> gpuworld::tune::Tuner<B> {
    use gpuworld::tune::{BenchmarkConfig, TuneMode, Tuner, TunerConfig};
    Tuner::new(
        client,
        TunerConfig::default()
            .with_benchmark(BenchmarkConfig::default().with_warmup(1).with_samples(3))
            .with_mode(TuneMode::Blocking)
            .with_cache(cache),
    )
}

/// `to_client` from `a` to `b` under concurrent writes, over `rounds` rounds of `elems` f32:
/// each round writes the source from a second stream of `a`, copies it, overwrites it at once,
/// and on `b` writes another buffer and scales the copy at once. Every copy holds its round's
/// value, never the next one, and every use on `b` sees it.
pub fn to_client_under_concurrent_writes<A: gpuworld::Backend, B: gpuworld::Backend>(
    a: &gpuworld::ComputeClient<A>,
    b: &gpuworld::ComputeClient<B>,
    elems: usize,
    rounds: u32,
) {
    use gpuworld::{Bindings, CubeCount, StreamId, library};
    let bytes = (elems * 4) as u64;
    let writer = a.with_stream(StreamId { value: 7 });
    let source = a.empty(bytes);
    let scratch = b.empty(bytes);
    let cubes = (elems as u32).div_ceil(library::LINEAR_CUBE);
    let mut copies = Vec::new();
    let mut scaled = Vec::new();
    for round in 0..rounds {
        let value = vec![round as f32; elems];
        writer
            .write(&source, bytemuck::cast_slice(&value))
            .expect("write");
        let copy = a.to_client(&source, b).expect("to_client");
        writer
            .write(&source, bytemuck::cast_slice(&vec![-1.0f32; elems]))
            .expect("overwrite");
        b.write(&scratch, bytemuck::cast_slice(&value))
            .expect("destination write");
        let out = b.empty(bytes);
        let bindings = Bindings::new().buffer(&copy).buffer(&out).scalar_f32(2.0);
        b.launch(&library::SCALE, CubeCount::new_1d(cubes), bindings)
            .expect("launch on the copy");
        copies.push(copy);
        scaled.push(out);
    }
    for (round, (copy, out)) in copies.iter().zip(&scaled).enumerate() {
        let got: Vec<f32> = b.read_one_as(copy).expect("read copy");
        assert!(
            got.iter().all(|&v| v == round as f32),
            "copy of round {round} holds {:?}",
            got.iter().find(|&&v| v != round as f32)
        );
        let got: Vec<f32> = b.read_one_as(out).expect("read scaled");
        assert!(
            got.iter().all(|&v| v == 2.0 * round as f32),
            "use of round {round} holds {:?}",
            got.iter().find(|&&v| v != 2.0 * round as f32)
        );
    }
}

/// `elems` f32 from `a` to `b` and back with `to_client`; both copies hold them exactly.
pub fn to_client_round_trip<A: gpuworld::Backend, B: gpuworld::Backend>(
    a: &gpuworld::ComputeClient<A>,
    b: &gpuworld::ComputeClient<B>,
    elems: usize,
) {
    let values: Vec<f32> = (0..elems).map(|i| i as f32 * 0.25).collect();
    let source = a.create_from_slice(bytemuck::cast_slice(&values));
    let there = a.to_client(&source, b).expect("to_client a -> b");
    let back = b.to_client(&there, a).expect("to_client b -> a");
    assert_eq!(b.read_one_as::<f32>(&there).expect("read on b"), values);
    assert_eq!(a.read_one_as::<f32>(&back).expect("read on a"), values);
}

/// `to_client` from `a` to `b` refuses what does not fit and a handle of the wrong client at
/// once; a source released before its copy is the destination stream's fault alone; both sides
/// go on working.
pub fn to_client_errors<A: gpuworld::Backend, B: gpuworld::Backend>(
    a: &gpuworld::ComputeClient<A>,
    b: &gpuworld::ComputeClient<B>,
) {
    use gpuworld::Error;
    let source = a.create_from_slice(&[1u8; 16]);
    let small = b.empty(8);
    let error = a
        .to_client_into(&source, b, &small)
        .expect_err("16 bytes into 8");
    assert!(
        matches!(error, Error::Binding(BindingError::WriteTooLarge { .. })),
        "{error}"
    );
    let error = b
        .to_client(&source, a)
        .expect_err("a handle of a, given to b");
    assert!(
        matches!(error, Error::Binding(BindingError::ForeignHandle { .. })),
        "{error}"
    );

    let gone = a.create_from_slice(&[2u8; 16]);
    let binding = gone.binding();
    drop(gone);
    let copy = a
        .to_client(binding, b)
        .expect("accepted: the release is found on the way");
    let error = b.sync().expect_err("the copy failed");
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "{error}"
    );
    a.sync().expect("the source's stream is not at fault");
    drop(copy);
    to_client_round_trip(a, b, 1000);
}

/// The f32s `handle` holds, read back (blocking).
pub fn floats<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    handle: &gpuworld::Handle,
) -> Vec<f32> {
    client.read_one_as::<f32>(handle).expect("read")
}

/// `k` chained `x += ones` (`ADD` reading and writing `x`), one cube of 256 per 256 floats: the
/// frame the graph tests capture.
pub fn add_chain<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    x: &gpuworld::Handle,
    ones: &gpuworld::Handle,
    k: usize,
) {
    let cubes = gpuworld::CubeCount::new_1d((x.size() / 4).div_ceil(256) as u32);
    for _ in 0..k {
        client
            .launch(
                &gpuworld::library::ADD,
                cubes,
                gpuworld::Bindings::new().buffer(x).buffer(ones).buffer(x),
            )
            .unwrap();
    }
}

/// A snapshot without the graph's holds, which the eager run has not.
pub fn without_holds(snapshot: &str) -> String {
    snapshot
        .lines()
        .map(|line| match line.find(", held by") {
            Some(at) => {
                // `, held by N graph(s)`, then whatever later stages add.
                let rest = &line[at + 2..];
                let end = rest.find(", ").map_or(line.len(), |e| at + 2 + e);
                format!("{}{}", &line[..at], &line[end..])
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A sim client on stream 0, one tick of latency, driven by hand (a thread's own stream may have
/// any number: snapshots would vary).
pub fn sim_on_stream_0() -> gpuworld::ComputeClient<gpuworld::SimBackend> {
    gpuworld::ComputeClient::new(
        gpuworld::SimBackend::new(gpuworld::SimConfig::default().with_latency_ticks(1)),
        gpuworld::RuntimeConfig::default(),
        gpuworld::Driver::Manual,
    )
    .with_stream(gpuworld::StreamId { value: 0 })
}

/// A frame of write, chain of 20 `x += ones`, write, chain of 5, write, captured on `client` and
/// replayed: the eager bytes every time, `units` (what the backend made to run the chains as
/// one unit each: CUDA graphs, wgpu plans) at 2 after the replays, and a `set_data` of the first
/// write seen by the next replay.
pub fn write_chain_frame_replays<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    units: impl Fn(&gpuworld::ComputeClient<B>) -> u64,
) {
    const N: usize = 1 << 10;
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let mut graph = client
        .capture(|c| {
            c.write(&x, bytemuck::cast_slice(&[10.0f32; N]))?;
            add_chain(c, &x, &ones, 20);
            c.write(&ones, bytemuck::cast_slice(&[2.0f32; N]))?;
            add_chain(c, &x, &ones, 5);
            // Back to ones for the next replay's first chain.
            c.write(&ones, bytemuck::cast_slice(&[1.0f32; N]))
        })
        .unwrap();
    assert_eq!(floats(client, &x), vec![40.0; N], "the capture's run");
    for _ in 0..3 {
        graph.replay().unwrap();
        assert_eq!(floats(client, &x), vec![40.0; N]);
    }
    assert_eq!(units(client), 2, "one unit for each chain, made once");
    graph
        .set_data(0, bytemuck::cast_slice(&[100.0f32; N]))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(client, &x), vec![130.0; N]);
}

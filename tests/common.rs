//! Shared pieces of the integration tests: polling a future once, f32 conversions, and a wgpu
//! device when this machine has one.

#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A future polled by hand, one tick at a time, as a game loop would.
pub struct Pending<T>(Pin<Box<dyn Future<Output = T> + Send>>);

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

/// Whether a missing wgpu adapter must fail the test (CI sets `GPUWORLD_REQUIRE_WGPU=1`).
#[cfg(feature = "wgpu")]
fn wgpu_required() -> bool {
    std::env::var("GPUWORLD_REQUIRE_WGPU").is_ok_and(|v| v == "1")
}

/// A wgpu backend on the default adapter; `None` (with a loud note) when there is none, unless
/// `GPUWORLD_REQUIRE_WGPU=1`, which makes a missing adapter a failure.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend_or_skip() -> Option<gpuworld::WgpuBackend> {
    wgpu_backend_with(gpuworld::WgpuConfig::default())
}

/// Like [`wgpu_backend_or_skip`], with `config`.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend_with(config: gpuworld::WgpuConfig) -> Option<gpuworld::WgpuBackend> {
    match gpuworld::WgpuBackend::new(config) {
        Ok(backend) => Some(backend),
        Err(error) if wgpu_required() => {
            panic!("GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no wgpu adapter: {error}");
            None
        }
    }
}

/// A client over [`wgpu_backend_with`]'s backend, driven by `driver`; `None` as it is.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_with(
    config: gpuworld::WgpuConfig,
    driver: gpuworld::Driver,
) -> Option<gpuworld::ComputeClient<gpuworld::WgpuBackend>> {
    let backend = wgpu_backend_with(config)?;
    Some(gpuworld::ComputeClient::new(
        backend,
        gpuworld::RuntimeConfig::default(),
        driver,
    ))
}

/// A client from `gpuworld::wgpu_client`, or `None` as [`wgpu_backend_or_skip`] decides.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_or_skip() -> Option<gpuworld::ComputeClient<gpuworld::WgpuBackend>> {
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => Some(client),
        Err(error) if wgpu_required() => {
            panic!("GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no wgpu adapter: {error}");
            None
        }
    }
}

/// Whether a missing CUDA driver must fail the test (the GPU machine sets `GPUWORLD_REQUIRE_CUDA=1`).
#[cfg(feature = "cuda")]
pub fn cuda_required() -> bool {
    std::env::var("GPUWORLD_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// A CUDA backend on device 0 with `config`; `None` (with a loud note) when there is no driver,
/// unless `GPUWORLD_REQUIRE_CUDA=1`, which makes a missing driver a failure.
#[cfg(feature = "cuda")]
pub fn cuda_backend_with(config: gpuworld::CudaConfig) -> Option<gpuworld::CudaBackend> {
    match gpuworld::CudaBackend::new(config) {
        Ok(backend) => Some(backend),
        Err(error) if cuda_required() => {
            panic!("GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no CUDA driver: {error}");
            None
        }
    }
}

/// Like [`cuda_backend_with`], with the default configuration.
#[cfg(feature = "cuda")]
pub fn cuda_backend_or_skip() -> Option<gpuworld::CudaBackend> {
    cuda_backend_with(gpuworld::CudaConfig::default())
}

/// A client from `gpuworld::cuda_client`, or `None` as [`cuda_backend_with`] decides.
#[cfg(feature = "cuda")]
pub fn cuda_client_or_skip() -> Option<gpuworld::ComputeClient<gpuworld::CudaBackend>> {
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => Some(client),
        Err(error) if cuda_required() => {
            panic!("GPUWORLD_REQUIRE_CUDA=1 but CUDA is unavailable: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no CUDA driver: {error}");
            None
        }
    }
}

/// A small use of `handle` on the client's stream: one cube of `FILL` (its first 256 floats).
pub fn fill_first_cube<B: gpuworld::Backend>(
    client: &gpuworld::ComputeClient<B>,
    handle: &gpuworld::Handle,
    value: f32,
) {
    client
        .launch(
            &gpuworld::library::FILL,
            gpuworld::CubeCount::new_1d(1),
            gpuworld::Bindings::new().buffer(handle).scalar_f32(value),
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

/// A backend suite: one module per backend, holding one `#[test]` per case, each of which makes
/// a client with the backend's expression and hands it to `crate::<module>::<case>`. A backend
/// marked `optional` gives an `Option` (`None`, for no device on this machine, skips the case);
/// attributes such as `#[cfg(feature = "wgpu")]` apply to a backend's module.
///
/// ```ignore
/// backend_suite! {
///     cases: [cases::fill_writes_every_element, memory::a_ring_of_live_buffers_stops_growing];
///     cpu: gpuworld::cpu_client(gpuworld::Driver::Manual);
///     #[cfg(feature = "wgpu")]
///     wgpu: optional crate::common::wgpu_client_or_skip();
/// }
/// ```
#[macro_export]
macro_rules! backend_suite {
    (cases: $cases:tt;) => {};
    (cases: $cases:tt; $(#[$attr:meta])* $backend:ident: optional $make:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $crate::backend_suite!(@module $backend, $make, $cases);
        $crate::backend_suite!(cases: $cases; $($rest)*);
    };
    (cases: $cases:tt; $(#[$attr:meta])* $backend:ident: $make:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $crate::backend_suite!(@module $backend, Some($make), $cases);
        $crate::backend_suite!(cases: $cases; $($rest)*);
    };
    (@module $backend:ident, $make:expr, [$($module:ident :: $case:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[test]
                fn $case() {
                    if let Some(client) = $make {
                        $crate::$module::$case(client);
                    }
                }
            )*
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
        TunerConfig {
            benchmark: BenchmarkConfig {
                warmup: 1,
                samples: 3,
            },
            mode: TuneMode::Blocking,
            cache,
        },
    )
}

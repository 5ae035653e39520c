//! One test body on every backend: cpu, sim and, where this build and this machine have them,
//! wgpu and CUDA. A backend that is absent is skipped loudly: a line on stderr and a [`Skipped`]
//! that a harness reports as ignored, never a silent pass.

use crate::{Backend, ComputeClient, SimConfig};

/// A test body generic over the backend, run by [`TestBackend::run`] and
/// [`run_on_every_backend`] (the [`on_every_backend!`](crate::on_every_backend) macro writes one
/// from a block).
pub trait BackendTest {
    /// Runs the test on `client`, the client of a new runtime ticked by hand
    /// ([`Driver::Manual`](crate::Driver::Manual)); a failure panics, as in any test.
    fn run<B: Backend>(&self, client: &ComputeClient<B>);
}

/// A backend the kit runs tests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TestBackend {
    /// The CPU backend (feature `cpu`, on by default).
    Cpu,
    /// The deterministic sim (always present).
    Sim,
    /// wgpu on the default adapter (feature `wgpu`, and an adapter on this machine).
    Wgpu,
    /// CUDA device 0 (feature `cuda`, and a driver on this machine).
    Cuda,
}

/// A backend a test did not run on, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not run on {backend}: {reason}")]
pub struct Skipped {
    /// The backend's name (`wgpu`).
    pub backend: &'static str,
    /// Why (`no wgpu adapter: ...`, `gpuworld was built without its "cuda" feature`).
    pub reason: String,
}

/// What [`run_on_every_backend`] did: the backends the test ran on and those it skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendRuns {
    /// The backends the test ran and passed on, in order.
    pub ran: Vec<&'static str>,
    /// The backends it did not run on, and why.
    pub skipped: Vec<Skipped>,
}

impl TestBackend {
    /// Every backend, in the order [`run_on_every_backend`] runs them.
    pub const ALL: [TestBackend; 4] = [
        TestBackend::Cpu,
        TestBackend::Sim,
        TestBackend::Wgpu,
        TestBackend::Cuda,
    ];

    /// Its name: `cpu`, `sim`, `wgpu`, `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            TestBackend::Cpu => "cpu",
            TestBackend::Sim => "sim",
            TestBackend::Wgpu => "wgpu",
            TestBackend::Cuda => "cuda",
        }
    }

    /// Whether a missing backend must fail instead of being skipped: `GPUWORLD_REQUIRE_WGPU=1`,
    /// `GPUWORLD_REQUIRE_CUDA=1` (cpu and sim are never missing).
    pub fn required(self) -> bool {
        let variable = match self {
            TestBackend::Wgpu => "GPUWORLD_REQUIRE_WGPU",
            TestBackend::Cuda => "GPUWORLD_REQUIRE_CUDA",
            TestBackend::Cpu | TestBackend::Sim => return true,
        };
        std::env::var(variable).is_ok_and(|v| v == "1")
    }

    /// Runs `test` on the client of a new runtime of this backend, ticked by hand; a [`Skipped`]
    /// (also printed on stderr) when this build or machine lacks the backend. Panics instead
    /// when the backend cannot open although [`TestBackend::required`].
    pub fn run(self, test: &impl BackendTest) -> Result<(), Skipped> {
        let opened = match self {
            TestBackend::Cpu => return self.run_cpu(test),
            TestBackend::Sim => crate::sim_client(SimConfig::default()).map(|c| test.run(&c)),
            TestBackend::Wgpu => return self.run_wgpu(test),
            TestBackend::Cuda => return self.run_cuda(test),
        };
        opened.map_err(|error| self.missing(format!("it did not open: {error}")))
    }

    #[cfg(feature = "cpu")]
    fn run_cpu(self, test: &impl BackendTest) -> Result<(), Skipped> {
        crate::cpu_client(crate::Driver::Manual)
            .map(|client| test.run(&client))
            .map_err(|error| self.missing(format!("it did not open: {error}")))
    }

    #[cfg(not(feature = "cpu"))]
    fn run_cpu(self, _test: &impl BackendTest) -> Result<(), Skipped> {
        Err(self.not_built())
    }

    #[cfg(feature = "wgpu")]
    fn run_wgpu(self, test: &impl BackendTest) -> Result<(), Skipped> {
        crate::wgpu_client_with(crate::WgpuConfig::default(), crate::Driver::Manual)
            .map(|client| test.run(&client))
            .map_err(|error| self.missing(format!("no wgpu adapter: {error}")))
    }

    #[cfg(not(feature = "wgpu"))]
    fn run_wgpu(self, _test: &impl BackendTest) -> Result<(), Skipped> {
        Err(self.not_built())
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(self, test: &impl BackendTest) -> Result<(), Skipped> {
        crate::cuda_client_with(crate::CudaConfig::default(), crate::Driver::Manual)
            .map(|client| test.run(&client))
            .map_err(|error| self.missing(format!("no CUDA driver: {error}")))
    }

    #[cfg(not(feature = "cuda"))]
    fn run_cuda(self, _test: &impl BackendTest) -> Result<(), Skipped> {
        Err(self.not_built())
    }

    /// The skip of a backend this build has no feature for: skipped even where required, since
    /// a build without the feature has no such backend to run.
    #[allow(dead_code)]
    fn not_built(self) -> Skipped {
        let skipped = Skipped {
            backend: self.name(),
            reason: format!("gpuworld was built without its {:?} feature", self.name()),
        };
        eprintln!("gpuworld::testing: {skipped}");
        skipped
    }

    /// The skip of a backend that did not open, or a panic where it is required.
    fn missing(self, reason: String) -> Skipped {
        if self.required() {
            panic!("{} is required here but {reason}", self.name());
        }
        let skipped = Skipped {
            backend: self.name(),
            reason,
        };
        eprintln!("gpuworld::testing: {skipped}");
        skipped
    }
}

/// Runs `test` on every backend in turn ([`TestBackend::ALL`]), each on a new runtime; which ran
/// and which were skipped (each skip also printed on stderr). A failure on one backend panics
/// with the backend's name in the message.
pub fn run_on_every_backend(test: &impl BackendTest) -> BackendRuns {
    let mut runs = BackendRuns::default();
    for backend in TestBackend::ALL {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| backend.run(test)));
        match outcome {
            Ok(Ok(())) => runs.ran.push(backend.name()),
            Ok(Err(skipped)) => runs.skipped.push(skipped),
            Err(panic) => {
                eprintln!("gpuworld::testing: the test failed on {}", backend.name());
                std::panic::resume_unwind(panic)
            }
        }
    }
    runs
}

/// Runs a block on every backend: `on_every_backend!(|client| { ... })` is
/// [`run_on_every_backend`](crate::testing::run_on_every_backend) of a
/// [`BackendTest`](crate::testing::BackendTest) whose body is the block, with `client` a
/// `&ComputeClient<B>` for each backend `B` in turn. The block captures nothing from around it
/// (it is a generic function's body); it returns `()` and fails by panicking.
///
/// ```
/// let runs = gpuworld::on_every_backend!(|client| {
///     let x = client.create_from_slice(&[1u8, 2, 3, 4]);
///     assert_eq!(client.read_one(&x).unwrap(), [1, 2, 3, 4]);
/// });
/// assert!(runs.ran.contains(&"cpu") && runs.ran.contains(&"sim"));
/// ```
#[macro_export]
macro_rules! on_every_backend {
    (|$client:ident| $body:block) => {{
        struct OnEveryBackend;
        impl $crate::testing::BackendTest for OnEveryBackend {
            fn run<B: $crate::Backend>(&self, $client: &$crate::ComputeClient<B>) $body
        }
        $crate::testing::run_on_every_backend(&OnEveryBackend)
    }};
}

//! The test harness of the binaries whose tests need a device (`harness = false` in Cargo.toml):
//! libtest's output and command line, but a test that finds no wgpu adapter or CUDA driver on
//! this machine is reported `ignored` with the reason, not passed. `GPUWORLD_REQUIRE_WGPU=1` and
//! `GPUWORLD_REQUIRE_CUDA=1` still make a missing device a failure (the `_or_skip` helpers in
//! `common` panic then instead of returning a [`Skip`]).

use std::process::ExitCode;

pub use libtest_mimic::Trial;
use libtest_mimic::{Arguments, Completion, Failed};

/// Why a test did not run: this machine lacks what it needs. A test returns it with `?`.
#[derive(Debug)]
pub struct Skip(pub String);

impl From<gpuworld::testing::Skipped> for Skip {
    fn from(skipped: gpuworld::testing::Skipped) -> Skip {
        Skip(skipped.reason)
    }
}

/// What a test function returns: `()`, or `Result<(), Skip>` for one that may find no device.
pub trait TestOutcome {
    /// `Completed`, or `Ignored` with the skip's reason.
    fn completion(self) -> Completion;
}

impl TestOutcome for () {
    fn completion(self) -> Completion {
        Completion::Completed
    }
}

impl TestOutcome for Result<(), Skip> {
    fn completion(self) -> Completion {
        match self {
            Ok(()) => Completion::Completed,
            Err(Skip(reason)) => Completion::ignored_with(reason),
        }
    }
}

/// The test `name` running `body`; a panic fails it, a [`Skip`] ignores it.
pub fn trial<R: TestOutcome + 'static>(name: &str, body: fn() -> R) -> Trial {
    Trial::ignorable_test(name.replace(' ', ""), move || {
        Ok::<_, Failed>(body().completion())
    })
}

/// Runs `trials` as libtest would, with its arguments (filters, `--exact`, `--ignored`, ...).
pub fn run(trials: Vec<Trial>) -> ExitCode {
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// The `main` of a `harness = false` test binary: each function listed is a test named as it is
/// (a `#[cfg(...)]` before one applies to it).
///
/// ```ignore
/// test_main![a_cpu_test, #[cfg(feature = "wgpu")] a_wgpu_test, cuda::a_case];
/// ```
#[macro_export]
macro_rules! test_main {
    ($($(#[$attr:meta])* $test:path),* $(,)?) => {
        // One `push` per test, so that a `#[cfg]` can leave one out.
        #[allow(clippy::vec_init_then_push)]
        fn main() -> std::process::ExitCode {
            let mut trials = Vec::new();
            $(
                $(#[$attr])*
                trials.push($crate::common::harness::trial(stringify!($test), $test));
            )*
            $crate::common::harness::run(trials)
        }
    };
}

//! `ComputeClient::warm_up`: a kernel's pipeline is compiled before its first launch (the launch
//! then compiles nothing), a kernel that does not compile reports it at once, a backend without a
//! source says so, and none of it ticks.

mod common;

use gpuworld::error::{ExecutionError, LaunchError};
use gpuworld::kernel::KernelSource;
use gpuworld::{Bindings, CubeCount, Driver, Error, KernelDef, Signature, library};

test_main![
    warming_up_a_kernel_without_a_source_for_the_backend_is_an_error_and_ticks_nothing,
    #[cfg(feature = "wgpu")]
    wgpu::a_warmed_up_kernel_compiles_nothing_at_its_first_launch,
    #[cfg(feature = "wgpu")]
    wgpu::warming_up_a_kernel_that_does_not_compile_returns_the_compile_error_and_launches_report_it,
];

/// The source type of a backend this binary does not have.
struct ElsewhereSource;

impl KernelSource for ElsewhereSource {}

static ELSEWHERE_ONLY: KernelDef = KernelDef {
    id: "tests.warm_up.elsewhere_only",
    name: "elsewhere_only",
    signature: Signature {
        buffers: &[],
        scalars: &[],
        cube_dim: [1, 1, 1],
    },
    sources: &[&ElsewhereSource],
};

fn warming_up_a_kernel_without_a_source_for_the_backend_is_an_error_and_ticks_nothing() {
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let error = client.warm_up(&ELSEWHERE_ONLY).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Launch(LaunchError::MissingKernelSource {
                kernel: "elsewhere_only",
                backend: "cpu"
            })
        ),
        "{error}"
    );
    client.warm_up(&library::SCALE).unwrap();
    assert_eq!(client.tick_count(), 0);
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;
    use common::Skip;
    use gpuworld::{Param, WgslSource};

    static BROKEN: KernelDef = KernelDef {
        id: "tests.warm_up.broken",
        name: "broken",
        signature: Signature {
            buffers: &[Param::f32("out")],
            scalars: &[],
            cube_dim: [64, 1, 1],
        },
        sources: &[&WgslSource(
            "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = this_is_undefined; }",
        )],
    };

    /// Asserts that `error` is BROKEN's compile error.
    #[track_caller]
    fn assert_is_brokens_compile_error(error: &Error) {
        assert!(
            matches!(
                error,
                Error::Execution(ExecutionError::Compile {
                    kernel: "broken",
                    ..
                })
            ),
            "{error}"
        );
    }

    pub fn a_warmed_up_kernel_compiles_nothing_at_its_first_launch() -> Result<(), Skip> {
        let client = common::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual)?;
        let compiled = || client.with_runtime(|rt| rt.backend().pipelines_compiled());
        let before = compiled();
        client.warm_up(&library::SCALE).unwrap();
        assert_eq!(compiled(), before + 1, "warm-up compiles the pipeline");
        assert_eq!(client.tick_count(), 0, "warm-up does not tick");
        client.warm_up(&library::SCALE).unwrap();
        assert_eq!(compiled(), before + 1, "a second warm-up finds it cached");
        let x = client.create_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0]));
        let y = client.empty(8);
        client
            .launch(
                &library::SCALE,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&x).buffer(&y).scalar_f32(3.0),
            )
            .unwrap();
        assert_eq!(client.read_one_as::<f32>(&y).unwrap(), [3.0, 6.0]);
        assert_eq!(compiled(), before + 1, "the launch compiled nothing");
        Ok(())
    }

    pub fn warming_up_a_kernel_that_does_not_compile_returns_the_compile_error_and_launches_report_it()
    -> Result<(), Skip> {
        let client = common::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual)?;
        let error = client.warm_up(&BROKEN).unwrap_err();
        assert_is_brokens_compile_error(&error);
        let out = client.empty(256);
        client
            .launch(&BROKEN, CubeCount::new_1d(1), Bindings::new().buffer(&out))
            .unwrap();
        let error = client.sync().unwrap_err();
        assert_is_brokens_compile_error(&error);
        Ok(())
    }
}

//! Bad input gets a typed error with a clear message, and the runtime stays usable with every
//! byte already written intact. Each test provokes one error, then proves the runtime still works.

mod common;

use common::{bytes_of, f32s};
use gpuworld::kernel::{CpuSource, CubeContext, KernelIo, KernelSource, Param, Signature};
use gpuworld::{Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Error, KernelDef, library};

fn cpu() -> ComputeClient<CpuBackend> {
    gpuworld::cpu_client(Driver::Manual)
}

/// Proves the client still creates, launches and reads, and that `kept` still holds `expected`.
fn still_works(client: &ComputeClient<CpuBackend>, kept: &gpuworld::Handle, expected: &[f32]) {
    assert_eq!(f32s(&client.read_one(kept).unwrap()), expected);
    let input = client.create(bytes_of(&[1.0, 2.0]));
    let output = client.empty(8);
    client
        .launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&input)
                .buffer(&output)
                .scalar_f32(2.0),
        )
        .unwrap();
    assert_eq!(f32s(&client.read_one(&output).unwrap()), vec![2.0, 4.0]);
    client.sync().unwrap();
}

#[test]
fn reading_a_released_handle_is_an_error() {
    let client = cpu();
    let kept = client.create(bytes_of(&[9.0; 4]));
    let handle = client.create(bytes_of(&[1.0; 4]));
    let binding = handle.binding();
    drop(handle);
    let error = client.read_one(binding).unwrap_err();
    assert_eq!(
        error,
        Error::ReleasedHandle {
            handle: binding.handle
        }
    );
    assert!(error.to_string().contains("was released"), "{error}");
    still_works(&client, &kept, &[9.0; 4]);
}

#[test]
fn launching_with_a_released_handle_reports_on_the_next_sync() {
    let client = cpu();
    let kept = client.create(bytes_of(&[3.0; 4]));
    let handle = client.empty(16);
    let binding = handle.binding();
    drop(handle);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(binding).scalar_f32(1.0),
        )
        .unwrap();
    assert_eq!(
        client.sync().unwrap_err(),
        Error::ReleasedHandle {
            handle: binding.handle
        }
    );
    still_works(&client, &kept, &[3.0; 4]);
}

#[test]
fn a_handle_from_another_runtime_is_rejected() {
    let client = cpu();
    let other = cpu();
    let kept = client.create(bytes_of(&[4.0; 2]));
    let foreign = other.create(bytes_of(&[1.0; 2]));
    let error = client.read_one(&foreign).unwrap_err();
    assert!(matches!(error, Error::ForeignHandle { .. }), "{error}");
    assert!(error.to_string().contains("belongs to"), "{error}");
    let launch = client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&foreign).scalar_f32(1.0),
    );
    assert!(matches!(launch, Err(Error::ForeignHandle { .. })));
    assert!(matches!(
        client.write(&foreign, &[0; 4]),
        Err(Error::ForeignHandle { .. })
    ));
    still_works(&client, &kept, &[4.0; 2]);
    assert_eq!(f32s(&other.read_one(&foreign).unwrap()), vec![1.0; 2]);
}

#[test]
fn offsets_past_the_end_are_rejected() {
    let client = cpu();
    let handle = client.create(bytes_of(&[5.0; 4]));
    let past = handle.clone().offset_start(12).offset_end(8);
    let error = client.read_one(&past).unwrap_err();
    assert_eq!(
        error,
        Error::OutOfRange {
            handle: handle.id(),
            start: 12,
            end: 8,
            size: 16
        }
    );
    assert!(
        error.to_string().contains("outside the handle's 16 bytes"),
        "{error}"
    );
    let too_far = handle.clone().offset_start(20);
    assert!(matches!(
        client.write(&too_far, &[]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        client.launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&too_far).scalar_f32(0.0)
        ),
        Err(Error::OutOfRange { .. })
    ));
    // An in-range offset reads just that range.
    assert_eq!(
        f32s(&client.read_one(&handle.clone().offset_start(8)).unwrap()),
        vec![5.0; 2]
    );
    still_works(&client, &handle, &[5.0; 4]);
}

#[test]
fn a_write_larger_than_the_handle_is_rejected_and_writes_nothing() {
    let client = cpu();
    let handle = client.create(bytes_of(&[6.0; 2]));
    let error = client.write(&handle, &bytes_of(&[1.0; 3])).unwrap_err();
    assert_eq!(
        error,
        Error::WriteTooLarge {
            handle: handle.id(),
            len: 12,
            capacity: 8
        }
    );
    assert!(error.to_string().contains("does not fit"), "{error}");
    still_works(&client, &handle, &[6.0; 2]);
}

#[test]
fn a_kernel_given_the_wrong_number_of_bindings_is_rejected() {
    let client = cpu();
    let kept = client.create(bytes_of(&[7.0; 2]));
    let error = client
        .launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::BindingCount {
            kernel: "add",
            what: "buffer bindings",
            expected: 3,
            got: 1
        }
    );
    assert_eq!(
        error.to_string(),
        "kernel `add` takes 3 buffer bindings, got 1"
    );
    let error = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept),
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::BindingCount {
                what: "scalars",
                ..
            }
        ),
        "{error}"
    );
    still_works(&client, &kept, &[7.0; 2]);
}

#[test]
fn a_binding_not_aligned_to_four_bytes_is_rejected() {
    let client = cpu();
    let kept = client.create(bytes_of(&[8.0; 4]));
    let error = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&kept.clone().offset_start(2))
                .scalar_f32(0.0),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::MisalignedBinding {
            kernel: "fill",
            index: 0,
            offset: 2
        }
    );
    still_works(&client, &kept, &[8.0; 4]);
}

/// No bindings, one unit per cube.
const NO_BINDINGS: Signature = Signature {
    buffers: &[],
    scalars: &[],
    cube_dim: [1, 1, 1],
};

/// The source type of a backend this binary does not have: any crate can define one.
struct ElsewhereSource;

impl KernelSource for ElsewhereSource {}

static ELSEWHERE_ONLY: KernelDef = KernelDef {
    id: "tests.elsewhere_only",
    name: "elsewhere_only",
    signature: NO_BINDINGS,
    sources: &[&ElsewhereSource],
};

#[test]
fn a_kernel_without_a_source_for_the_backend_is_rejected() {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.5; 2]));
    let error = client
        .launch(&ELSEWHERE_ONLY, CubeCount::new_1d(1), Bindings::new())
        .unwrap_err();
    assert_eq!(
        error,
        Error::MissingKernelSource {
            kernel: "elsewhere_only",
            backend: "cpu"
        }
    );
    assert_eq!(
        error.to_string(),
        "kernel `elsewhere_only` has no source for the cpu backend"
    );
    still_works(&client, &kept, &[1.5; 2]);
}

fn panics_on_cube_one(ctx: &CubeContext, io: &KernelIo<'_>) {
    assert!(ctx.cube_pos[0] != 1, "cube 1 refuses to run");
    io.store_f32(0, ctx.cube_pos[0] as usize, 42.0);
}

/// One `f32` buffer, one unit per cube.
const ONE_BUFFER: Signature = Signature {
    buffers: &[Param::f32("out")],
    scalars: &[],
    cube_dim: [1, 1, 1],
};

static PANICKY: KernelDef = KernelDef {
    id: "tests.panicky",
    name: "panicky",
    signature: ONE_BUFFER,
    sources: &[&CpuSource(panics_on_cube_one)],
};

#[test]
fn a_kernel_that_panics_is_an_error_on_its_stream_reported_on_the_next_read() {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.5; 4]));
    let scratch = client.empty(16);
    client
        .launch(
            &PANICKY,
            CubeCount::new_1d(4),
            Bindings::new().buffer(&scratch),
        )
        .expect("the launch itself is accepted");
    let error = client.read_one(&scratch).unwrap_err();
    match &error {
        Error::KernelPanic {
            kernel, message, ..
        } => {
            assert_eq!(*kernel, "panicky");
            assert!(message.contains("cube 1 refuses to run"), "{message}");
        }
        other => panic!("expected a kernel panic, got {other}"),
    }
    // Reported once: the stream is clean again.
    client.sync().unwrap();
    still_works(&client, &kept, &[2.5; 4]);
}

fn stores_one_past_the_end(_ctx: &CubeContext, io: &KernelIo<'_>) {
    io.store_f32(0, io.len32(0), 42.0);
}

static PAST_THE_END: KernelDef = KernelDef {
    id: "tests.past_the_end",
    name: "past_the_end",
    signature: ONE_BUFFER,
    sources: &[&CpuSource(stores_one_past_the_end)],
};

#[test]
fn an_out_of_bounds_store_in_an_unchecked_launch_is_a_kernel_panic_on_the_host() {
    let client = cpu();
    let target = client.create(bytes_of(&[1.0; 16]));
    let neighbour = client.create(bytes_of(&[2.5; 16]));
    // SAFETY: deliberately broken: the kernel stores past its binding's end, which a host
    // backend must turn into an error instead of a write into the neighbour.
    unsafe {
        client
            .launch_unchecked(
                &PAST_THE_END,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&target),
            )
            .expect("the launch itself is accepted");
    }
    match client.sync() {
        Err(Error::KernelPanic {
            kernel, message, ..
        }) => {
            assert_eq!(kernel, "past_the_end");
            assert!(message.contains("out of bounds"), "{message}");
        }
        other => panic!("expected a kernel panic, got {other:?}"),
    }
    assert_eq!(f32s(&client.read_one(&target).unwrap()), vec![1.0; 16]);
    still_works(&client, &neighbour, &[2.5; 16]);
}

#[test]
fn a_kernel_that_panics_is_reported_by_sync_too() {
    let client = cpu();
    let scratch = client.empty(16);
    client
        .launch(
            &PANICKY,
            CubeCount::new_1d(2),
            Bindings::new().buffer(&scratch),
        )
        .unwrap();
    assert!(matches!(client.sync(), Err(Error::KernelPanic { .. })));
    client.sync().unwrap();
}

#[test]
fn a_zero_cube_count_is_a_no_op() {
    let client = cpu();
    let handle = client.create(bytes_of(&[3.0; 4]));
    for count in [
        CubeCount::Static(0, 1, 1),
        CubeCount::Static(4, 0, 1),
        CubeCount::Static(1, 1, 0),
    ] {
        client
            .launch(
                &library::FILL,
                count,
                Bindings::new().buffer(&handle).scalar_f32(9.0),
            )
            .unwrap();
    }
    let zero = client.create(bytemuck::cast_slice(&[0u32, 0, 0]).to_vec());
    client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(zero.binding()),
            Bindings::new().buffer(&handle).scalar_f32(9.0),
        )
        .unwrap();
    client.sync().unwrap();
    assert_eq!(f32s(&client.read_one(&handle).unwrap()), vec![3.0; 4]);
}

#[test]
fn running_out_of_memory_is_an_error_and_keeps_what_exists() {
    let backend = CpuBackend::with_capacity(Some(1024));
    let client = ComputeClient::new(backend, Default::default(), Driver::Manual);
    let kept = client.create(bytes_of(&[1.0; 128]));
    let huge = client.empty(4096);
    let error = client.read_one(&huge).unwrap_err();
    match &error {
        Error::OutOfMemory { requested, usage } => {
            assert_eq!(*requested, 4096);
            assert_eq!(usage.bytes_in_use, 512);
        }
        other => panic!("expected out of memory, got {other}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("out of memory: 4096 bytes requested"),
        "{error}"
    );
    // The failure belongs to the handle: the stream has no fault, other handles read fine.
    client.sync().unwrap();
    drop(huge);
    still_works(&client, &kept, &[1.0; 128]);
}

#[test]
fn a_failed_allocation_is_reported_by_every_use_of_its_handle_and_by_nothing_else() {
    let backend = CpuBackend::with_capacity(Some(1024));
    let client = ComputeClient::new(backend, Default::default(), Driver::Manual);
    let kept = client.create(bytes_of(&[1.0; 128]));
    let huge = client.empty(4096);
    // The next read on the stream is of another, valid handle: it gets its data.
    assert_eq!(f32s(&client.read_one(&kept).unwrap()), vec![1.0; 128]);
    client.sync().unwrap();
    for _ in 0..2 {
        assert!(matches!(
            client.read_one(&huge),
            Err(Error::OutOfMemory { .. })
        ));
    }
    // A launch that uses it fails, and reports that on its stream like any failed launch.
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&huge).scalar_f32(2.0),
        )
        .unwrap();
    assert!(matches!(client.sync(), Err(Error::OutOfMemory { .. })));
    assert_eq!(f32s(&client.read_one(&kept).unwrap()), vec![1.0; 128]);
}

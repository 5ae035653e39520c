//! A device fault on the cuda backend: an illegal address becomes an error on the stream it ran
//! on, reported by the next read or sync. CUDA makes such an error sticky for the whole process
//! ("the process must be terminated and relaunched"), so gpuworld guarantees that every later read
//! or sync on every stream of that runtime returns the fault instead of hanging, that a new cuda
//! runtime in the same process either works (where the driver recovers) or is refused with
//! `BackendUnavailable` naming the error, never a panic, and that other backends keep working.
//! This is the only test of its binary, since the fault reaches every CUDA user of the process.

mod common;

use common::{Skip, cuda_client_or_skip, f32s};
use gpuworld::error::{DeviceError, ExecutionError};
use gpuworld::kernel::{Param, Signature};
use gpuworld::{Bindings, CubeCount, CudaSource, Error, KernelDef, StreamId, library};

test_main![an_illegal_address_faults_its_stream_and_later_calls_fail_instead_of_hanging];

/// Stores one word a terabyte past its binding: an illegal address on any device.
static WILD_STORE: KernelDef = KernelDef {
    id: "test.cuda.wild_store",
    name: "wild_store",
    signature: Signature {
        buffers: &[Param::f32("out")],
        scalars: &[],
        cube_dim: [1, 1, 1],
    },
    sources: &[&CudaSource(
        r#"
extern "C" __global__ void wild_store(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        *(volatile float*)((char*)out + (1ull << 40)) = 1.0f;
    }
}
"#,
    )],
};

fn an_illegal_address_faults_its_stream_and_later_calls_fail_instead_of_hanging() -> Result<(), Skip>
{
    let client = cuda_client_or_skip()?;
    let before = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 4]));
    assert_eq!(f32s(&client.read_one(&before).unwrap()), vec![1.0; 4]);

    let out = client.empty(16);
    // SAFETY: the store is out of bounds on purpose; the device catches it as an illegal address.
    unsafe {
        client
            .launch_unchecked(
                &WILD_STORE,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&out),
            )
            .unwrap();
    }
    match client.read_one(&out) {
        Err(Error::Execution(ExecutionError::DeviceFault { stream, message })) => {
            assert_eq!(stream, client.stream_id());
            assert!(
                message.contains("ILLEGAL_ADDRESS") || message.contains("illegal"),
                "{message}"
            );
        }
        other => panic!("expected a device fault, got {other:?}"),
    }

    // The context is poisoned: later work on this and other streams reports the fault.
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&out).scalar_f32(1.0),
        )
        .unwrap();
    assert!(matches!(
        client.sync(),
        Err(Error::Execution(ExecutionError::DeviceFault { .. }))
    ));
    let other_stream = std::thread::spawn(StreamId::current).join().unwrap();
    let other = client.with_stream(other_stream);
    assert!(matches!(
        other.read_one(&before),
        Err(Error::Execution(ExecutionError::DeviceFault { .. }))
    ));
    assert!(client.with_runtime(|rt| rt.backend().poisoned().is_some()));
    drop((before, out, other));
    drop(client);

    // A new cuda runtime: refused with the sticky error, or working if the driver recovered.
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(fresh) => {
            let handle = fresh.empty(1024);
            fresh
                .launch(
                    &library::FILL,
                    CubeCount::new_1d(1),
                    Bindings::new().buffer(&handle).scalar_f32(3.0),
                )
                .unwrap();
            assert_eq!(f32s(&fresh.read_one(&handle).unwrap()), vec![3.0; 256]);
            eprintln!("a new cuda runtime after the fault works");
        }
        Err(Error::Device(DeviceError::BackendUnavailable { reason, .. })) => {
            assert!(reason.contains("ILLEGAL_ADDRESS"), "{reason}");
            eprintln!("a new cuda runtime after the fault is refused: {reason}");
        }
        Err(other) => panic!("expected a working client or BackendUnavailable, got {other}"),
    }

    // Other backends of the process are untouched.
    let cpu = gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    let handle = cpu.empty(16);
    cpu.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&handle).scalar_f32(5.0),
    )
    .unwrap();
    assert_eq!(f32s(&cpu.read_one(&handle).unwrap()), vec![5.0; 4]);
    Ok(())
}

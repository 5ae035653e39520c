//! What the tests of a fault on one of two GPUs share (`cuda_fault_devices`,
//! `cuda_fault_collective`): a kernel that faults late, bounded waits, and the two clients with
//! a group over them, each client pinned to one stream so that a wait on another thread waits
//! for the same work (a client's stream is otherwise the calling thread's).

use super::{Skip, cuda_clients_or_skip, f32s, within};
use gpuworld::collective::{ElemType, Group, ReduceOp};
use gpuworld::error::{ExecutionError, MemoryError};
use gpuworld::kernel::{Param, Signature};
use gpuworld::{
    Binding, Bindings, ComputeClient, CubeCount, CudaBackend, CudaSource, Error, Handle, KernelDef,
    StreamId,
};

/// Spins `before` thousand clock cycles, stores one word a terabyte past its binding when `wild`
/// is not 0 (an illegal address on any device), then spins up to `after` thousand more: the
/// fault is delivered while the kernel still runs, so no later work of its stream starts before
/// the context dies (a kernel that ended at the store let the next one run first).
pub static SLOW_WILD_STORE: KernelDef = KernelDef {
    id: "test.cuda.slow_wild_store",
    name: "slow_wild_store",
    signature: Signature {
        buffers: &[Param::f32("out")],
        scalars: &[
            Param::u32("before"),
            Param::u32("after"),
            Param::u32("wild"),
        ],
        cube_dim: [1, 1, 1],
    },
    sources: &[&CudaSource(
        r#"
extern "C" __global__ void slow_wild_store(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        long long start = clock64();
        while (clock64() - start < (long long)before * 1000) {}
        if (wild) { *(volatile float*)((char*)out + (1ull << 40)) = 1.0f; }
        start = clock64();
        while (clock64() - start < (long long)after * 1000) {}
    }
}
"#,
    )],
};

/// `client.sync()` within [`super::LIMIT`].
pub fn sync_within(what: &str, client: &ComputeClient<CudaBackend>) -> Result<(), Error> {
    let client = client.clone();
    within(what, move || client.sync())
}

/// `handle`'s floats read within [`super::LIMIT`].
pub fn read_within(
    what: &str,
    client: &ComputeClient<CudaBackend>,
    handle: &Handle,
) -> Result<Vec<f32>, Error> {
    let (client, handle) = (client.clone(), handle.clone());
    within(what, move || {
        client.read_one(&handle).map(|bytes| f32s(&bytes))
    })
}

/// A read or sync that must fail because its device failed: a device fault, or the refused
/// allocation of a handle it uses, whose message holds `needle`.
pub fn assert_fault(result: Result<impl std::fmt::Debug, Error>, what: &str, needle: &str) {
    match result {
        Err(Error::Execution(ExecutionError::DeviceFault { message, .. })) => {
            assert!(message.contains(needle), "{what}: {message}");
        }
        Err(Error::Memory(MemoryError::DeviceFailed { reason, .. })) => {
            assert!(reason.contains(needle), "{what}: {reason}");
        }
        other => panic!("{what}: expected a device fault mentioning {needle:?}, got {other:?}"),
    }
}

/// Two GPUs' clients, each pinned to stream 0, the group over them, and one buffer of `n` floats
/// each (GPU 0: 1.0, GPU 1: 2.0) after a first all_reduce that worked (3.0 on both); a [`Skip`]
/// without two GPUs or NCCL.
pub type TwoGpus = (
    ComputeClient<CudaBackend>,
    ComputeClient<CudaBackend>,
    Group<CudaBackend>,
    [Handle; 2],
);

/// See [`TwoGpus`].
pub fn two_gpus(n: usize) -> Result<TwoGpus, Skip> {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .try_init();
    let clients = cuda_clients_or_skip(2)?;
    let stream = StreamId { value: 0 };
    let (a, b) = (
        clients[0].with_stream(stream),
        clients[1].with_stream(stream),
    );
    let group = Group::new(vec![a.clone(), b.clone()])
        .unwrap_or_else(|error| panic!("a group of two GPUs: {error}"));
    let xs = [
        a.create_from_slice(bytemuck::cast_slice(&vec![1.0f32; n])),
        b.create_from_slice(bytemuck::cast_slice(&vec![2.0f32; n])),
    ];
    if let Err(error) = all_reduce(&group, &xs) {
        if error.to_string().contains("NCCL could not be loaded") {
            return Err(Skip(format!("no NCCL: {error}")));
        }
        panic!("all_reduce: {error}");
    }
    assert_eq!(
        read_within("GPU 0's read", &a, &xs[0]).unwrap(),
        vec![3.0; n]
    );
    assert_eq!(
        read_within("GPU 1's read", &b, &xs[1]).unwrap(),
        vec![3.0; n]
    );
    Ok((a, b, group, xs))
}

/// A sum over both GPUs' buffers, queued.
pub fn all_reduce(group: &Group<CudaBackend>, xs: &[Handle; 2]) -> Result<(), Error> {
    let both: Vec<Binding> = xs.iter().map(Handle::binding).collect();
    group.all_reduce(&both, ElemType::F32, ReduceOp::Sum)
}

/// Launches [`SLOW_WILD_STORE`] on `client`: a fault after about `before_ms` of spinning.
pub fn fault_after(client: &ComputeClient<CudaBackend>, before_ms: u32) {
    let out = client.empty(16);
    // About 2,000 cycles a microsecond.
    let before = before_ms.saturating_mul(2_000);
    // SAFETY: the store is out of bounds on purpose; the device catches it as an illegal address.
    unsafe {
        client
            .launch_unchecked(
                &SLOW_WILD_STORE,
                CubeCount::new_1d(1),
                Bindings::new()
                    .buffer(&out)
                    .scalar_u32(before)
                    .scalar_u32(1_000_000)
                    .scalar_u32(1),
            )
            .unwrap_or_else(|error| panic!("launching the faulting kernel: {error}"));
    }
}

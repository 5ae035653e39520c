//! Collectives of CUDA groups through NCCL: each rank's part is a native task on its stream
//! (`gpuworld_cuda::NcclCall`), ordered and its buffers kept alive like a launch's bindings.
//! Communicators are made once per group, at its first collective (`ensure_init`).

use super::{ElemType, Group, ReduceOp};
use crate::ComputeClient;
use gpuworld_cuda::cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t};
use gpuworld_cuda::{CudaBackend, NcclCall, NcclComm, NcclKind};
use gpuworld_systems::{Backend, Binding, Error, Result};
use smallvec::SmallVec;
use std::any::Any;
use std::sync::Arc;

/// The group's clients as CUDA clients, when `B` is the CUDA backend.
pub(super) fn cuda_clients<B: Backend>(
    clients: &[ComputeClient<B>],
) -> Option<Vec<&ComputeClient<CudaBackend>>> {
    clients
        .iter()
        .map(|c| (c as &dyn Any).downcast_ref::<ComputeClient<CudaBackend>>())
        .collect()
}

/// Plain bytes, for collectives that move rather than reduce.
pub(super) const BYTES: ncclDataType_t = ncclDataType_t::ncclUint8;

/// NCCL's name of `elem`.
pub(super) fn dtype(elem: ElemType) -> ncclDataType_t {
    match elem {
        ElemType::F32 => ncclDataType_t::ncclFloat32,
        ElemType::F16 => ncclDataType_t::ncclFloat16,
        ElemType::BF16 => ncclDataType_t::ncclBfloat16,
        ElemType::I32 => ncclDataType_t::ncclInt32,
    }
}

/// NCCL's name of `op`.
fn red_op(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Prod => ncclRedOp_t::ncclProd,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
    }
}

/// The communicators of `group`, made at the first call; `Error::BackendUnavailable` without
/// NCCL. Several ranks need device threads: NCCL calls of several ranks from one thread must be
/// grouped, and a manually ticked runtime calls NCCL from whoever ticks it.
pub(super) fn ensure_init<B: Backend>(
    group: &Group<B>,
    cuda: &[&ComputeClient<CudaBackend>],
) -> Result<Vec<Arc<NcclComm>>> {
    if cuda.len() > 1 && cuda.iter().any(|c| c.driver() == crate::Driver::Manual) {
        return Err(Error::CollectiveMismatch {
            op: "nccl",
            reason: "NCCL collectives over several devices need Driver::DeviceThread clients"
                .into(),
        });
    }
    group
        .nccl
        .get_or_init(|| {
            let devices: Vec<u32> = cuda.iter().map(|c| c.device_id().index).collect();
            gpuworld_cuda::communicators(&devices)
        })
        .clone()
}

/// Each rank's `[input, output]` pair, as `run` takes its buffers.
pub(super) fn pairs(inputs: &[Binding], outputs: &[Binding]) -> Vec<SmallVec<[Binding; 4]>> {
    inputs
        .iter()
        .zip(outputs)
        .map(|(i, o)| smallvec::smallvec![*i, *o])
        .collect()
}

/// Queues rank `r`'s part of `kind` on each rank's stream over `buffers[r]`.
pub(super) fn run<B: Backend>(
    group: &Group<B>,
    cuda: &[&ComputeClient<CudaBackend>],
    kind: NcclKind,
    dtype: ncclDataType_t,
    count: usize,
    buffers: &[SmallVec<[Binding; 4]>],
) -> Result<()> {
    let comms = ensure_init(group, cuda)?;
    for ((client, comm), bindings) in cuda.iter().zip(comms).zip(buffers) {
        let call = NcclCall {
            comm,
            kind,
            dtype,
            count,
        };
        client.push_native(Box::new(call), bindings.clone());
    }
    Ok(())
}

/// NCCL's `all_reduce` kind for `op`.
pub(super) fn all_reduce(op: ReduceOp) -> NcclKind {
    NcclKind::AllReduce(red_op(op))
}

/// NCCL's `reduce_scatter` kind for `op`.
pub(super) fn reduce_scatter(op: ReduceOp) -> NcclKind {
    NcclKind::ReduceScatter(red_op(op))
}

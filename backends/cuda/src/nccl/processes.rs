//! NCCL across processes: rank 0's unique id and `ncclCommInitRank` on every rank.

use super::clique::Clique;
use super::comms::{NcclComm, NcclGroup};
use super::library::{nccl, unavailable};
use cudarc::driver::sys as cu;
use cudarc::nccl::sys;
use gpuworld_hal::backend::NativeWork;
use gpuworld_hal::cross_device::{
    CollectiveHealth, CollectiveOp, DeviceCollectives, ProcessCollectives,
};
use gpuworld_hal::error::{CollectiveError, Error};
use std::ffi::{c_char, c_int};
use std::sync::Arc;

/// backend's [`ProcessCollectives`]).
#[derive(Debug)]
pub struct NcclProcesses;

impl ProcessCollectives for NcclProcesses {
    fn group_id(&self) -> Result<Vec<u8>, Error> {
        let id = nccl()?.unique_id()?;
        Ok(id.internal.iter().map(|&b| b as u8).collect())
    }

    fn join(
        &self,
        device: u32,
        id: &[u8],
        rank: usize,
        world: usize,
    ) -> Result<Arc<dyn DeviceCollectives>, Error> {
        let comm = process_communicator(device, id, rank, world)?;
        Ok(Arc::new(NcclProcessGroup(comm)))
    }
}

/// This process's communicator of the NCCL group `id` names (rank 0's
/// [`ProcessCollectives::group_id`]): rank `rank` of `world` on GPU `device`. Blocks until every
/// rank has joined.
pub fn process_communicator(
    device: u32,
    id: &[u8],
    rank: usize,
    world: usize,
) -> Result<Arc<NcclComm>, Error> {
    let nccl = nccl()?;
    let driver_error = |what: &str, code: cu::CUresult| {
        unavailable(format!(
            "{what} for NCCL on GPU {device}: {}",
            crate::loader::describe(crate::loader::sys_error(code))
        ))
    };
    crate::loader::driver().map_err(unavailable)?;
    let mut unique = sys::ncclUniqueId { internal: [0; 128] };
    if id.len() != unique.internal.len() {
        return Err(unavailable(format!(
            "an NCCL unique id has {} bytes, not {}",
            unique.internal.len(),
            id.len()
        )));
    }
    for (to, &from) in unique.internal.iter_mut().zip(id) {
        *to = from as c_char;
    }
    let (Ok(nranks), Ok(me)) = (c_int::try_from(world), c_int::try_from(rank)) else {
        return Err(unavailable(format!(
            "rank {rank} of {world} is beyond NCCL's ranks"
        )));
    };
    let ordinal = c_int::try_from(device).unwrap_or(c_int::MAX);
    let mut handle = 0;
    let mut context = std::ptr::null_mut();
    // SAFETY: out-pointers; the primary context is retained for the communicator's life (the
    // clique keeps it; released never: the process's backend holds it too, and the driver
    // counts retains).
    unsafe {
        let code = cu::cuDeviceGet(&mut handle, ordinal);
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuDeviceGet", code));
        }
        let code = cu::cuDevicePrimaryCtxRetain(&mut context, handle);
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuDevicePrimaryCtxRetain", code));
        }
    }
    crate::loader::bind_context(context);
    let mut comm = std::ptr::null_mut();
    // SAFETY: `comm` is an out-pointer; `unique` came from rank 0's `ncclGetUniqueId`; NCCL
    // takes the device from the current context, bound above.
    let code = unsafe { (nccl.comm_init_rank)(&mut comm, nranks, unique, me) };
    nccl.check(code, "ncclCommInitRank").map_err(unavailable)?;
    let clique = Arc::new(Clique::new(vec![comm], Some(context)));
    Ok(Arc::new(NcclComm {
        clique,
        device,
        rank,
        slot: 0,
        ranks: world,
    }))
}

/// This process's rank of an NCCL group spanning processes: its [`DeviceCollectives`].
#[derive(Debug)]
pub struct NcclProcessGroup(pub Arc<NcclComm>);

impl DeviceCollectives for NcclProcessGroup {
    fn rank_work(&self, rank: usize, op: CollectiveOp) -> Result<NativeWork, Error> {
        if rank != self.0.rank {
            return Err(Error::Collective(CollectiveError::MismatchedBuffers {
                op: "nccl",
                reason: format!("rank {rank}'s part asked of rank {}", self.0.rank).into(),
            }));
        }
        // The process's one communicator, whatever its rank.
        NcclGroup(vec![self.0.clone()]).rank_work(0, op)
    }

    fn health(&self) -> CollectiveHealth {
        self.0.clique.health(self.0.slot)
    }

    fn close(&self, reason: &str) {
        self.0.clique.close(reason);
    }

    fn abort(&self, reason: &str) {
        self.0.clique.abort(reason);
    }
}

/// Runs `f` between `ncclGroupStart` and `ncclGroupEnd`: how one thread issues the calls of
/// several ranks without deadlock.
pub fn grouped<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    let nccl = nccl()?;
    // SAFETY: group calls take no arguments and nest.
    let code = unsafe { (nccl.group_start)() };
    nccl.check(code, "ncclGroupStart").map_err(unavailable)?;
    let result = f();
    // SAFETY: as above, closing the group opened here.
    let code = unsafe { (nccl.group_end)() };
    nccl.check(code, "ncclGroupEnd").map_err(unavailable)?;
    Ok(result)
}

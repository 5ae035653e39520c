//! Kernel launches on the cuda backend: the compiled variant for the mode and count kind, the
//! arguments in the order of the generated parameter list (`cuda_c::parameter_list`), and
//! `cuLaunchKernel` on the stream.

use crate::device::CudaBackend;
use cudarc::driver::sys;
use gpuworld_hal::backend::{LaunchCount, Region};
use gpuworld_hal::error::Error;
use gpuworld_hal::kernel::{ExecutionMode, Kernel};
use smallvec::SmallVec;
use std::ffi::c_void;

/// Blocks per multiprocessor of a launch whose cube count is read on the device.
const DYNAMIC_BLOCKS_PER_SM: u32 = 8;

/// A launch's function, dimensions and arguments, ready for `cuLaunchKernel` or a graph node.
pub(crate) struct PreparedLaunch {
    function: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    pointers: SmallVec<[u64; 8]>,
    words: SmallVec<[u32; 16]>,
    buffers: usize,
    dynamic: bool,
}

impl PreparedLaunch {
    /// Every argument's address, in the order of the generated parameter list
    /// (`cuda_c::parameter_list`); valid while `self` is neither moved nor changed.
    fn params(&mut self) -> SmallVec<[*mut c_void; 24]> {
        let mut params: SmallVec<[*mut c_void; 24]> = SmallVec::new();
        for i in 0..self.buffers {
            params.push((&mut self.pointers[i] as *mut u64).cast());
            params.push((&mut self.words[i] as *mut u32).cast());
        }
        for i in self.buffers..self.words.len() {
            params.push((&mut self.words[i] as *mut u32).cast());
        }
        if self.dynamic {
            params.push((&mut self.pointers[self.buffers] as *mut u64).cast());
        }
        params
    }
}

impl CudaBackend {
    /// `kernel`'s launch over `buffers` and `scalars` for stream `s`: `None` for a launch of no
    /// cubes (nothing runs).
    pub(crate) fn prepare_launch(
        &mut self,
        s: usize,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) -> Result<Option<PreparedLaunch>, Error> {
        let dynamic = matches!(count, LaunchCount::Dynamic(_));
        let function = self.kernels.function(kernel, mode, dynamic)?;
        let stream = self.streams[s].id;
        let freed = || {
            Error::device_fault(
                stream,
                format!("kernel `{}` bound to freed memory", kernel.name),
            )
        };
        let mut pointers: SmallVec<[u64; 8]> = SmallVec::with_capacity(buffers.len() + 1);
        let mut words: SmallVec<[u32; 16]> = SmallVec::with_capacity(buffers.len() + scalars.len());
        for region in buffers {
            pointers.push(self.region_pointer(*region).ok_or_else(freed)?);
            words.push(u32::try_from(region.size / 4).unwrap_or(u32::MAX));
        }
        words.extend_from_slice(scalars);
        let grid = match count {
            LaunchCount::Static(grid) => grid,
            LaunchCount::Dynamic(region) => {
                pointers.push(self.region_pointer(region).ok_or_else(freed)?);
                [self.multiprocessors * DYNAMIC_BLOCKS_PER_SM, 1, 1]
            }
        };
        if grid.contains(&0) {
            return Ok(None);
        }
        Ok(Some(PreparedLaunch {
            function,
            grid,
            block: kernel.signature.cube_dim,
            pointers,
            words,
            buffers: buffers.len(),
            dynamic,
        }))
    }

    /// Launches `kernel` on stream `s`; an error the launch cannot even start with is returned.
    pub(crate) fn launch_on(
        &mut self,
        s: usize,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) -> Result<(), Error> {
        let Some(mut launch) = self.prepare_launch(s, kernel, count, buffers, scalars, mode)?
        else {
            return Ok(());
        };
        let mut params = launch.params();
        let stream = self.work_stream(s);
        let ([gx, gy, gz], [bx, by, bz]) = (launch.grid, launch.block);
        // SAFETY: `function` is a loaded kernel whose parameters are, by the generated list,
        // exactly the pointers and 32-bit words in `params` (which point into `launch`, untouched
        // until the call returned); the device pointers are live allocations (the runtime frees
        // memory only after the events that prove the device is done).
        let code = unsafe {
            sys::cuLaunchKernel(
                launch.function,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.failed(s, &format!("launch of `{}`", kernel.name), code);
        }
        Ok(())
    }

    /// Sets kernel node `node` of executable `exec` to `launch` (its arguments copied by the
    /// call): a graph's scalar update without building it afresh.
    pub(crate) fn set_node_launch(
        &self,
        exec: sys::CUgraphExec,
        node: sys::CUgraphNode,
        launch: &mut PreparedLaunch,
    ) -> sys::CUresult {
        // SAFETY: `node` is a kernel node of the graph `exec` was instantiated from (kept alive
        // beside it), `function` the same kernel it was built with, and the arguments point
        // into `launch`, which outlives the call (the driver copies them).
        launch.with_node_params(|params| unsafe {
            sys::cuGraphExecKernelNodeSetParams_v2(exec, node, params)
        })
    }

    /// Adds `launch` to `graph` as a kernel node after `deps` (its arguments copied by the call).
    pub(crate) fn add_node(
        &self,
        graph: sys::CUgraph,
        deps: &[sys::CUgraphNode],
        launch: &mut PreparedLaunch,
    ) -> Result<sys::CUgraphNode, sys::CUresult> {
        let mut node = std::ptr::null_mut();
        // SAFETY: `graph` is a graph of this context and `deps` nodes of it; the arguments point
        // into `launch`, which outlives the call (the driver copies them); `node` an out-pointer.
        let code = launch.with_node_params(|params| unsafe {
            sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), params)
        });
        match code {
            sys::CUresult::CUDA_SUCCESS => Ok(node),
            code => Err(code),
        }
    }
}

impl PreparedLaunch {
    /// Calls `call` with the launch as a kernel node's parameters, which point into `self`.
    fn with_node_params(
        &mut self,
        call: impl FnOnce(&sys::CUDA_KERNEL_NODE_PARAMS) -> sys::CUresult,
    ) -> sys::CUresult {
        let ([gx, gy, gz], [bx, by, bz]) = (self.grid, self.block);
        let function = self.function;
        let mut params = self.params();
        let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: function,
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: 0,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        call(&node_params)
    }
}

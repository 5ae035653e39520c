//! Kernel launches on the cuda backend: the compiled variant for the mode and count kind, the
//! arguments in the order of the generated parameter list (`cuda_c::parameter_list`), and
//! `cuLaunchKernel` on the stream.

use crate::{CudaBackend, DYNAMIC_BLOCKS_PER_SM};
use cudarc::driver::sys;
use gpuworld_systems::backend::{LaunchCount, Region};
use gpuworld_systems::error::Error;
use gpuworld_systems::kernel::{ExecutionMode, Kernel};
use smallvec::SmallVec;
use std::ffi::c_void;

impl CudaBackend {
    /// Launches `kernel` on stream `s` (`into`, where given, takes the launch in `s`'s place:
    /// a graph's capture stream); an error the launch cannot even start with is returned.
    #[allow(clippy::too_many_arguments, reason = "a launch's parts")]
    pub(crate) fn launch_on(
        &mut self,
        s: usize,
        into: Option<sys::CUstream>,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) -> Result<(), Error> {
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
            return Ok(());
        }
        // Every argument's address, in the order of the generated parameter list
        // (`cuda_c::parameter_list`); the arrays above are not touched again until the launch
        // returned, so the addresses stay valid.
        let mut params: SmallVec<[*mut c_void; 24]> = SmallVec::new();
        for i in 0..buffers.len() {
            params.push((&mut pointers[i] as *mut u64).cast());
            params.push((&mut words[i] as *mut u32).cast());
        }
        for i in buffers.len()..words.len() {
            params.push((&mut words[i] as *mut u32).cast());
        }
        if dynamic {
            params.push((&mut pointers[buffers.len()] as *mut u64).cast());
        }
        let [bx, by, bz] = kernel.signature.cube_dim;
        let stream = match into {
            Some(stream) => stream,
            None => self.work_stream(s),
        };
        // SAFETY: `function` is a loaded kernel whose parameters are, by the generated list,
        // exactly the pointers and 32-bit words in `params`; the device pointers are live allocations
        // (the runtime frees memory only after the events that prove the device is done).
        let code = unsafe {
            sys::cuLaunchKernel(
                function,
                grid[0],
                grid[1],
                grid[2],
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
}

//! Small reads by a kernel: a read of at most `CudaConfig::small_read_max` bytes into page-locked
//! memory is one launch of a copy kernel that writes the bytes straight into the read's pinned
//! buffer and then the stream's read flag (`flags.rs`), instead of a copy-engine copy and a
//! separate flag write. One driver call instead of two, and no hand-over from the compute engine
//! to the copy engine after the kernel before it: the round trip of a launch and a small read
//! waits only for the device's kernels (issue 52, the round trip row).
//!
//! The kernel is hand-written PTX, loaded (the driver compiles it for the device) at the first
//! small read; where the device has no unified addressing (its kernels cannot write page-locked
//! host memory by its host address), or the driver refuses the module or a launch, small reads
//! go back to the copy engine for good and nothing else changes.

use cudarc::driver::sys;
use std::ffi::c_void;

/// The copy kernel: `len` bytes from `src` (device memory) to `dst` (page-locked host memory),
/// by words where `src` is word-aligned, then, once every thread's stores are visible to the
/// host (`membar.sys`, then the block's barrier), `value` into the word at `flag`. One block.
const PTX: &str = r#"
.version 6.0
.target sm_52
.address_size 64

.visible .entry gpuworld_small_read(
    .param .u64 p_src,
    .param .u64 p_dst,
    .param .u32 p_len,
    .param .u64 p_flag,
    .param .u32 p_value
)
{
    .reg .pred %p<4>;
    .reg .b16 %h<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [p_src];
    ld.param.u64 %rd2, [p_dst];
    ld.param.u32 %r1, [p_len];
    ld.param.u64 %rd3, [p_flag];
    ld.param.u32 %r2, [p_value];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    // Words: as many whole words as `len` holds where `src` is word-aligned, else none.
    cvt.u32.u64 %r9, %rd1;
    and.b32 %r9, %r9, 3;
    setp.eq.u32 %p3, %r9, 0;
    shr.u32 %r6, %r1, 2;
    selp.u32 %r6, %r6, 0, %p3;
    mov.u32 %r5, %r3;
$L_words:
    setp.ge.u32 %p1, %r5, %r6;
    @%p1 bra $L_bytes_start;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u32 %r7, [%rd5];
    add.s64 %rd6, %rd2, %rd4;
    st.global.u32 [%rd6], %r7;
    add.u32 %r5, %r5, %r4;
    bra.uni $L_words;
$L_bytes_start:
    shl.b32 %r8, %r6, 2;
    add.u32 %r5, %r8, %r3;
$L_bytes:
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra $L_done;
    cvt.u64.u32 %rd4, %r5;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u8 %h1, [%rd5];
    add.s64 %rd6, %rd2, %rd4;
    st.global.u8 [%rd6], %h1;
    add.u32 %r5, %r5, %r4;
    bra.uni $L_bytes;
$L_done:
    membar.sys;
    bar.sync 0;
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra $L_end;
    st.volatile.global.u32 [%rd3], %r2;
$L_end:
    ret;
}
"#;

/// Threads of the one block: one per word up to this many (a round trip's 4 bytes take a warp).
const MAX_THREADS: u32 = 1024;

/// The copy kernel, loaded at the first small read.
#[derive(Debug, Default)]
pub(crate) enum SmallReads {
    /// Not loaded yet.
    #[default]
    Untried,
    /// Loaded.
    Ready {
        module: sys::CUmodule,
        function: sys::CUfunction,
    },
    /// Small reads use the copy engine: off by configuration, or refused by the device.
    Off,
}

impl SmallReads {
    /// Loads the kernel for `device` where it can write page-locked memory by its host address;
    /// the context must be current.
    fn load(device: sys::CUdevice) -> SmallReads {
        let mut unified = 0;
        // SAFETY: an out-pointer and a valid device.
        let code = unsafe {
            sys::cuDeviceGetAttribute(
                &mut unified,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
                device,
            )
        };
        if code != sys::CUresult::CUDA_SUCCESS || unified == 0 {
            tracing::debug!(target: "gpuworld::stream", ?code, unified, "no unified addressing: small reads use the copy engine");
            return SmallReads::Off;
        }
        let source = format!("{PTX}\0");
        let mut module = std::ptr::null_mut();
        // SAFETY: `source` is NUL-terminated PTX text; `module` an out-pointer.
        let code = unsafe { sys::cuModuleLoadData(&mut module, source.as_ptr().cast()) };
        if code != sys::CUresult::CUDA_SUCCESS {
            tracing::debug!(target: "gpuworld::stream", ?code, "the small-read kernel did not load: small reads use the copy engine");
            return SmallReads::Off;
        }
        let mut function = std::ptr::null_mut();
        // SAFETY: the module was just loaded; the name is NUL-terminated.
        let code = unsafe {
            sys::cuModuleGetFunction(&mut function, module, c"gpuworld_small_read".as_ptr())
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: loaded above, used by nothing.
            unsafe { sys::cuModuleUnload(module) };
            return SmallReads::Off;
        }
        SmallReads::Ready { module, function }
    }

    /// Enqueues on `stream` the copy of `len` bytes from `src` into the page-locked `dst`, then
    /// the write of `value` into the word at `flag`; whether it was enqueued (the context is
    /// current). A refused launch turns small reads off; the caller then copies as before.
    ///
    /// # Safety
    /// `src` holds `len` live device bytes, `dst` is page-locked host memory of at least `len`
    /// bytes kept until the flag is seen or the stream's work is done, and `flag` a device-mapped
    /// word of this context.
    pub(crate) unsafe fn enqueue(
        &mut self,
        device: sys::CUdevice,
        stream: sys::CUstream,
        copy: SmallCopy,
    ) -> bool {
        if matches!(self, SmallReads::Untried) {
            *self = SmallReads::load(device);
        }
        let SmallReads::Ready { function, .. } = *self else {
            return false;
        };
        let SmallCopy {
            mut src,
            dst,
            mut len,
            mut flag,
            mut value,
        } = copy;
        let mut dst = dst as u64;
        let words = len.div_ceil(4).max(1);
        let threads = words.div_ceil(32).saturating_mul(32).min(MAX_THREADS);
        let mut params: [*mut c_void; 5] = [
            (&mut src as *mut u64).cast(),
            (&mut dst as *mut u64).cast(),
            (&mut len as *mut u32).cast(),
            (&mut flag as *mut u64).cast(),
            (&mut value as *mut u32).cast(),
        ];
        // SAFETY: the kernel's parameters are exactly these five, in this order, pointing at
        // locals that outlive the call (the driver copies them); the pointers are valid by the
        // caller's promise.
        let code = unsafe {
            sys::cuLaunchKernel(
                function,
                1,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if code == sys::CUresult::CUDA_SUCCESS {
            return true;
        }
        tracing::debug!(target: "gpuworld::stream", ?code, "the small-read kernel was refused: small reads use the copy engine");
        self.unload();
        *self = SmallReads::Off;
        false
    }

    /// Whether small reads are off for good.
    pub(crate) fn is_off(&self) -> bool {
        matches!(self, SmallReads::Off)
    }

    /// Unloads the kernel (the context is current and no work will run it any more).
    pub(crate) fn unload(&mut self) {
        if let SmallReads::Ready { module, .. } = std::mem::take(self) {
            // SAFETY: loaded by `load`; nothing runs its function any more.
            unsafe { sys::cuModuleUnload(module) };
        }
    }
}

/// One small read's copy: device source, page-locked destination (by its host address, which is
/// its device address under unified addressing), length, and the flag word and value after it.
pub(crate) struct SmallCopy {
    pub(crate) src: sys::CUdeviceptr,
    pub(crate) dst: *mut u8,
    pub(crate) len: u32,
    pub(crate) flag: sys::CUdeviceptr,
    pub(crate) value: u32,
}

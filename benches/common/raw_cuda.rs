//! The raw side of the CUDA benches: device 0's primary context made current, and library
//! kernels compiled with NVRTC and loaded by hand, as a program on the driver API would. Included
//! by `benches/cuda.rs` and `benches/graph.rs`.

use gpuworld::KernelDef;
use gpuworld::cudarc::driver::sys;
use std::ffi::CString;

/// Panics naming `what` unless the driver call succeeded (a bench's raw side has no other use
/// for a failure).
pub fn check(code: sys::CUresult, what: &str) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Makes device 0's primary context current (gpuworld opened it, so the driver loads) and loads
/// `kernels`' CUDA C in one module: their functions, in order. What is made lives for the
/// process.
pub fn load_kernels(kernels: &[&KernelDef]) -> Vec<sys::CUfunction> {
    let mut source = gpuworld_cuda::PRELUDE.to_string();
    for kernel in kernels {
        source.push('\n');
        source.push_str(
            &gpuworld_cuda::cuda_text(kernel)
                .unwrap_or_else(|| panic!("`{}` has CUDA C", kernel.name)),
        );
    }
    let ptx = gpuworld::cudarc::nvrtc::compile_ptx(source).expect("NVRTC compiles");
    let image = CString::new(ptx.to_src()).expect("PTX has no NUL");
    // SAFETY: plain driver calls on the primary context, each checked; the context and module
    // are never released.
    unsafe {
        let mut device = 0;
        check(sys::cuDeviceGet(&mut device, 0), "cuDeviceGet");
        let mut context = std::ptr::null_mut();
        check(
            sys::cuDevicePrimaryCtxRetain(&mut context, device),
            "retain",
        );
        check(sys::cuCtxSetCurrent(context), "cuCtxSetCurrent");
        let mut module = std::ptr::null_mut();
        check(
            sys::cuModuleLoadData(&mut module, image.as_ptr().cast()),
            "load",
        );
        kernels
            .iter()
            .map(|kernel| {
                let name = CString::new(kernel.name).expect("a C name");
                let mut function = std::ptr::null_mut();
                check(
                    sys::cuModuleGetFunction(&mut function, module, name.as_ptr()),
                    kernel.name,
                );
                function
            })
            .collect()
    }
}

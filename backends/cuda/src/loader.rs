//! Finding the CUDA driver and NVRTC before cudarc touches them: cudarc panics when a library it
//! loads lazily is missing, so every entry point first proves here that the library loads.

use cudarc::driver::{result, sys};
use std::sync::{Arc, OnceLock};

/// Where NVRTC is looked for besides the loader's search path: CUDA installs that are often not
/// on `LD_LIBRARY_PATH`.
const NVRTC_PATHS: [&str; 6] = [
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so.12",
    "/usr/local/cuda/lib64/libnvrtc.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.12",
    "/usr/lib/x86_64-linux-gnu/libnvrtc.so",
];

/// Loads the driver library and initialises it once; the reason when it cannot be used.
pub fn driver() -> Result<(), Arc<str>> {
    static DRIVER: OnceLock<Result<(), Arc<str>>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the candidates cudarc would load; runs no library code
            // beyond the loader's initialisers.
            if !unsafe { sys::is_culib_present() } {
                return Err(
                    "libcuda.so could not be loaded (is an NVIDIA driver installed?)".into(),
                );
            }
            result::init().map_err(|error| {
                format!("the CUDA driver failed to initialise: {}", describe(error)).into()
            })
        })
        .clone()
}

/// Loads NVRTC once, from the search path or a usual CUDA install; the reason when it cannot.
pub fn nvrtc() -> Result<(), Arc<str>> {
    static NVRTC: OnceLock<Result<(), Arc<str>>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            // SAFETY: as in `driver`: only dlopen of NVRTC candidates.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Ok(());
            }
            for path in NVRTC_PATHS {
                // SAFETY: loading NVRTC runs only its initialisers. The library is kept loaded
                // for the whole process (leaked), so that cudarc's later dlopen by soname finds it.
                if let Ok(library) = unsafe { libloading::Library::new(path) } {
                    std::mem::forget(library);
                    // SAFETY: as above.
                    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                        return Ok(());
                    }
                }
            }
            Err(
                "NVRTC (libnvrtc.so) could not be loaded: kernels cannot be compiled; \
                 add the CUDA toolkit's lib64 to LD_LIBRARY_PATH"
                    .into(),
            )
        })
        .clone()
}

/// A driver error as `NAME: description`.
pub fn describe(error: result::DriverError) -> String {
    let name = error
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Whether `error` leaves the context unusable: every later call in it fails the same way.
pub fn is_sticky(code: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUDA_ERROR_LAUNCH_TIMEOUT
    )
}

/// Makes `context` current on the calling thread, where it is not already.
pub(crate) fn bind_context(context: sys::CUcontext) {
    let mut current = std::ptr::null_mut();
    // SAFETY: `context` is a primary context its backend retained and keeps until `Drop`;
    // `current` is a valid out-pointer.
    unsafe {
        if sys::cuCtxGetCurrent(&mut current) != sys::CUresult::CUDA_SUCCESS || current != context {
            sys::cuCtxSetCurrent(context);
        }
    }
}

/// `code` as the driver error cudarc reports.
pub(crate) fn sys_error(code: sys::CUresult) -> result::DriverError {
    result::DriverError(code)
}

//! Kernels from CUDA C to loaded functions: NVRTC compiles a source once per kernel id, device
//! architecture, execution mode and count kind into a CUBIN, kept in memory and in a disk cache
//! keyed by the hash of everything that went into it; cuModuleLoadData loads it.

use crate::cuda_c::{PRELUDE, cuda_text};
use crate::loader;
use cudarc::driver::sys;
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use gpuworld_hal::error::{DeviceError, Error, ExecutionError, LaunchError};
use gpuworld_hal::kernel::{ExecutionMode, Kernel};
use rustc_hash::FxHashMap as HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one compiled variant of a kernel is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VariantKey {
    /// The kernel's stable id.
    pub id: &'static str,
    /// Whether accesses are bound-checked.
    pub checked: bool,
    /// Whether the cube count is read from device memory.
    pub dynamic: bool,
}

/// How often each path served a kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Variants compiled by NVRTC.
    pub compiled: u64,
    /// Variants loaded from the disk cache.
    pub disk_hits: u64,
    /// Launches served from the in-memory cache.
    pub memory_hits: u64,
}

/// Compiled kernels of one device.
pub struct KernelCache {
    arch: (i32, i32),
    dir: Option<PathBuf>,
    functions: HashMap<VariantKey, Result<sys::CUfunction, Error>>,
    /// The variant launched last: runs of the same kernel skip the map.
    last: Option<(VariantKey, sys::CUfunction)>,
    modules: Vec<sys::CUmodule>,
    stats: CompileStats,
}

impl KernelCache {
    /// A cache for a device of compute capability `arch`, with CUBINs on disk under `dir`.
    pub fn new(arch: (i32, i32), dir: Option<PathBuf>) -> KernelCache {
        KernelCache {
            arch,
            dir,
            functions: HashMap::default(),
            last: None,
            modules: Vec::new(),
            stats: CompileStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CompileStats {
        self.stats
    }

    /// The function of `kernel` in `mode`; compiles and loads it the first time (the context
    /// must be current). A failure is remembered: the same source fails the same way.
    pub fn function(
        &mut self,
        kernel: Kernel,
        mode: ExecutionMode,
        dynamic: bool,
    ) -> Result<sys::CUfunction, Error> {
        let key = VariantKey {
            id: kernel.id,
            checked: mode == ExecutionMode::Checked,
            dynamic,
        };
        if let Some((last, function)) = self.last
            && last == key
        {
            self.stats.memory_hits += 1;
            return Ok(function);
        }
        let result = match self.functions.get(&key) {
            Some(found) => {
                self.stats.memory_hits += 1;
                found.clone()
            }
            None => {
                let result = self.load(kernel, key);
                self.functions.insert(key, result.clone());
                result
            }
        };
        if let Ok(function) = result {
            self.last = Some((key, function));
        }
        result
    }

    fn load(&mut self, kernel: Kernel, key: VariantKey) -> Result<sys::CUfunction, Error> {
        // The client refuses kernels without CUDA C; only a direct backend call gets here.
        let source = cuda_text(kernel).ok_or(Error::Launch(LaunchError::MissingKernelSource {
            kernel: kernel.name,
            backend: "cuda",
        }))?;
        let (major, minor) = self.arch;
        let options = options(self.arch, key);
        let text = format!("{PRELUDE}\n{source}");
        let hash = fnv1a(&[text.as_bytes(), options.join(" ").as_bytes()]);
        let file = self.dir.as_ref().map(|dir| {
            dir.join(format!(
                "{}-sm{major}{minor}-{}-{}-{hash:016x}.cubin",
                kernel.id.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
                if key.checked { "checked" } else { "unchecked" },
                if key.dynamic { "dynamic" } else { "static" },
            ))
        });
        let cached = file.as_deref().and_then(|path| std::fs::read(path).ok());
        let cubin = match cached {
            Some(bytes) => {
                self.stats.disk_hits += 1;
                bytes
            }
            None => {
                let bytes = compile(kernel.name, &text, &options)?;
                self.stats.compiled += 1;
                if let Some(path) = &file {
                    store(path, &bytes);
                }
                bytes
            }
        };
        tracing::debug!(target: "gpuworld::kernel", kernel = kernel.id, ?key, "loading module");
        let module = load_module(kernel.name, &cubin)?;
        self.modules.push(module);
        let name = CString::new(kernel.name).map_err(|_| {
            Error::Execution(ExecutionError::Compile {
                kernel: kernel.name,
                log: "the kernel's name contains a NUL byte".into(),
            })
        })?;
        let mut function = std::ptr::null_mut();
        // SAFETY: `module` was just loaded in the current context and stays loaded until drop.
        let result = unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) };
        result.result().map_err(|error| {
            Error::Execution(ExecutionError::Compile {
                kernel: kernel.name,
                log: format!(
                    "the module has no `extern \"C\" __global__` function named `{}`: {}",
                    kernel.name,
                    loader::describe(error)
                )
                .into(),
            })
        })?;
        Ok(function)
    }

    /// Unloads every module (the context must be current and no launch in flight).
    pub fn unload(&mut self) {
        self.functions.clear();
        self.last = None;
        for module in self.modules.drain(..) {
            // SAFETY: the module was loaded by this cache and none of its functions runs now.
            unsafe {
                sys::cuModuleUnload(module);
            }
        }
    }
}

/// NVRTC's options for `key`'s variant on a device of compute capability `arch`.
fn options((major, minor): (i32, i32), key: VariantKey) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{major}{minor}"),
        format!("-DGPUWORLD_CHECKED={}", u8::from(key.checked)),
        format!("-DGPUWORLD_DYNAMIC={}", u8::from(key.dynamic)),
        // Keeps a * b + c rounded twice, as on the CPU, so results match bit for bit.
        "--fmad=false".to_string(),
        "--std=c++17".to_string(),
    ]
}

/// The default disk cache: `$GPUWORLD_CUDA_CACHE`, else `$XDG_CACHE_HOME/gpuworld/cuda`, else
/// `$HOME/.cache/gpuworld/cuda`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GPUWORLD_CUDA_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("gpuworld").join("cuda"))
}

fn compile(kernel: &'static str, text: &str, options: &[String]) -> Result<Vec<u8>, Error> {
    loader::nvrtc().map_err(|reason| {
        Error::Device(DeviceError::BackendUnavailable {
            backend: "cuda",
            reason,
        })
    })?;
    let source = CString::new(text).map_err(|_| {
        Error::Execution(ExecutionError::Compile {
            kernel,
            log: "the source contains a NUL byte".into(),
        })
    })?;
    let name = CString::new(format!("{kernel}.cu")).unwrap_or_default();
    let program = nvrtc::create_program(&source, Some(&name)).map_err(|error| {
        Error::Execution(ExecutionError::Compile {
            kernel,
            log: format!("nvrtcCreateProgram failed: {error:?}").into(),
        })
    })?;
    // SAFETY: `program` is a live NVRTC program destroyed below, whatever the outcome.
    let outcome = unsafe {
        match nvrtc::compile_program(program, options) {
            Ok(()) => cubin(program).map_err(|error| format!("nvrtcGetCUBIN failed: {error:?}")),
            Err(error) => {
                let log = nvrtc::get_program_log(program)
                    .map(|chars| {
                        let bytes: Vec<u8> = chars
                            .iter()
                            .take_while(|c| **c != 0)
                            .map(|c| *c as u8)
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                let log = crate::cuda_c::log_in_source_lines(&log, &format!("{kernel}.cu"));
                Err(format!("{error:?}\n{log}"))
            }
        }
    };
    // SAFETY: destroys the program created above, once.
    let _ = unsafe { nvrtc::destroy_program(program) };
    outcome.map_err(|log| {
        Error::Execution(ExecutionError::Compile {
            kernel,
            log: Arc::from(log),
        })
    })
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `program` must be a live, successfully compiled NVRTC program.
unsafe fn cubin(program: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: per the function's contract.
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(program, &mut size).result()? };
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds the `size` bytes NVRTC writes.
    unsafe { nvrtc_sys::nvrtcGetCUBIN(program, bytes.as_mut_ptr().cast()).result()? };
    Ok(bytes)
}

fn load_module(kernel: &'static str, cubin: &[u8]) -> Result<sys::CUmodule, Error> {
    let mut module = std::ptr::null_mut();
    // SAFETY: `cubin` is a complete CUBIN image that outlives the call; the context is current.
    let result = unsafe { sys::cuModuleLoadData(&mut module, cubin.as_ptr().cast()) };
    result.result().map_err(|error| {
        Error::Execution(ExecutionError::Compile {
            kernel,
            log: format!("cuModuleLoadData failed: {}", loader::describe(error)).into(),
        })
    })?;
    Ok(module)
}

/// Writes a CUBIN to the disk cache through a temporary file, so readers never see half of one;
/// a cache that cannot be written only costs a compile next time.
fn store(path: &Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&temp, bytes))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(error) = written {
        tracing::warn!(target: "gpuworld::kernel", path = %path.display(), %error, "cannot write the CUDA kernel cache");
        let _ = std::fs::remove_file(&temp);
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust versions, for file names.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for byte in part.iter() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuworld_hal::library;

    /// NVRTC needs no GPU, so this runs wherever NVRTC loads (`LD_LIBRARY_PATH`), and skips
    /// loudly elsewhere unless `GPUWORLD_REQUIRE_CUDA=1`.
    #[test]
    fn every_library_kernel_compiles_in_every_variant() {
        if let Err(reason) = loader::nvrtc() {
            let required = std::env::var("GPUWORLD_REQUIRE_CUDA").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "GPUWORLD_REQUIRE_CUDA=1 but NVRTC does not load: {reason}"
            );
            eprintln!("SKIPPED: no NVRTC: {reason}");
            return;
        }
        for kernel in library::ALL.iter().copied() {
            let Some(source) = cuda_text(kernel) else {
                panic!("{} has no CUDA C", kernel.id);
            };
            let text = format!("{PRELUDE}\n{source}");
            for (checked, dynamic) in [(false, false), (false, true), (true, false), (true, true)] {
                let key = VariantKey {
                    id: kernel.id,
                    checked,
                    dynamic,
                };
                if let Err(error) = compile(kernel.name, &text, &options((9, 0), key)) {
                    panic!("{key:?}: {error}");
                }
            }
        }
    }
}

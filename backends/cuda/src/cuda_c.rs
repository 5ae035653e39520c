//! CUDA C sources: the source type a kernel lists for this backend, the prelude every source is
//! compiled with, and the parameter list generated from the kernel's signature.
//!
//! # Convention
//! - A source defines one `extern "C" __global__ void <kernel name>(GW_PARAMS)`. `GW_PARAMS` is
//!   generated from the signature, in launch order: for each buffer a pointer named after it
//!   (`float*`, `unsigned int*` or `int*`, `const` for a read-only buffer; an atomic buffer is a
//!   plain pointer, which `atomicAdd`.. take) and its length in 32-bit elements, `unsigned int <name>_len`;
//!   then each scalar by name (`float` or `unsigned int`); then, with a dynamic cube count, the
//!   pointer to the count.
//! - One CUDA block is one cube (`blockDim` = the signature's `cube_dim`). The body sits inside
//!   `GW_FOR_EACH_CUBE { ... }` and reads its cube from `GW_CUBE_INDEX` (flattened as
//!   `CubeContext::cube_index`: `x + cx * (y + cy * z)`), `GW_CUBE_X`/`GW_CUBE_Y`/`GW_CUBE_Z`,
//!   and the first unit of a 1-D cube from `GW_FIRST_UNIT_1D`; leave a cube with `continue`,
//!   never `return` (a launch with a dynamic count runs several cubes per block).
//! - Every access is guarded with `GW_IN_BOUNDS(index, <name>_len)`: true in unchecked launches
//!   (compiled with `-DGPUWORLD_CHECKED=0`), a real check in checked ones
//!   (`-DGPUWORLD_CHECKED=1`), where a load out of bounds gives 0 and a store out of bounds is
//!   dropped, as on the CPU.
//! - The backend compiles [`PRELUDE`], then [`cuda_text`]: the kernel's `GW_PARAMS`, then its
//!   source. With a dynamic cube count (`-DGPUWORLD_DYNAMIC=1`) the backend launches a fixed
//!   grid whose blocks stride over the cubes.

use crate::CudaBackend;
use gpuworld_hal::backend::Kernels;
use gpuworld_hal::kernel::{Access, Elem, KernelDef};

pub use gpuworld_hal::kernel::CudaSource;

/// Macros every source is compiled with; see the module's convention.
pub const PRELUDE: &str = r#"
#ifndef GPUWORLD_CHECKED
#define GPUWORLD_CHECKED 1
#endif
#ifndef GPUWORLD_DYNAMIC
#define GPUWORLD_DYNAMIC 0
#endif
#if GPUWORLD_CHECKED
#define GW_IN_BOUNDS(index, len) ((unsigned long long)(index) < (unsigned long long)(len))
#else
#define GW_IN_BOUNDS(index, len) true
#endif
#if GPUWORLD_DYNAMIC
#define GW_COUNT_PARAM , const unsigned int* gw_count
#define GW_COUNT_PARAM_ONLY const unsigned int* gw_count
#define GW_CUBE_COUNT_Z gw_count[2]
#define GW_FOR_EACH_CUBE \
    const unsigned long long gw_cx = gw_count[0], gw_cy = gw_count[1]; \
    const unsigned long long gw_total = gw_cx * gw_cy * (unsigned long long)gw_count[2]; \
    for (unsigned long long gw_cube = blockIdx.x; gw_cube < gw_total; gw_cube += gridDim.x)
#else
#define GW_COUNT_PARAM
#define GW_COUNT_PARAM_ONLY
#define GW_CUBE_COUNT_Z gridDim.z
#define GW_FOR_EACH_CUBE \
    const unsigned long long gw_cx = gridDim.x, gw_cy = gridDim.y; \
    for (unsigned long long gw_cube = blockIdx.x + gw_cx * (blockIdx.y + gw_cy * blockIdx.z), \
         gw_once = 0; gw_once < 1; ++gw_once)
#endif
#define GW_CUBE_INDEX gw_cube
#define GW_CUBE_X ((unsigned int)(gw_cube % gw_cx))
#define GW_CUBE_Y ((unsigned int)((gw_cube / gw_cx) % gw_cy))
#define GW_CUBE_Z ((unsigned int)(gw_cube / (gw_cx * gw_cy)))
#define GW_UNITS ((unsigned long long)blockDim.x * blockDim.y * blockDim.z)
#define GW_UNIT (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define GW_FIRST_UNIT_1D (gw_cube * GW_UNITS)
"#;

fn c_type(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "float",
        Elem::U32 => "unsigned int",
        Elem::I32 => "int",
    }
}

/// The parameter list of `kernel`, in the order the launch passes its arguments: each buffer's
/// pointer and length, each scalar, then the dynamic count's pointer (through the prelude's
/// `GW_COUNT_PARAM`).
pub fn parameter_list(kernel: &KernelDef) -> String {
    let signature = &kernel.signature;
    let params: Vec<String> = signature
        .buffers
        .iter()
        .map(|buffer| {
            format!(
                "{}{}* {name}, unsigned int {name}_len",
                if buffer.access == Access::Read {
                    "const "
                } else {
                    ""
                },
                c_type(buffer.elem),
                name = buffer.name
            )
        })
        .chain(
            signature
                .scalars
                .iter()
                .map(|scalar| format!("{} {}", c_type(scalar.elem), scalar.name)),
        )
        .collect();
    if params.is_empty() {
        "GW_COUNT_PARAM_ONLY".to_string()
    } else {
        format!("{} GW_COUNT_PARAM", params.join(", "))
    }
}

/// The CUDA C NVRTC compiles for `kernel` after [`PRELUDE`]: its `GW_PARAMS`, then its source;
/// `None` when the backend has no CUDA source for it. Texts of several kernels may follow one
/// prelude in one program.
pub fn cuda_text(kernel: &KernelDef) -> Option<String> {
    let source = CudaBackend::source_for(kernel)?;
    Some(format!(
        "#undef GW_PARAMS\n#define GW_PARAMS {}\n{}",
        parameter_list(kernel),
        source.0
    ))
}

/// Lines before a kernel's own source in the program NVRTC compiles (`{PRELUDE}\n` then
/// [`cuda_text`]'s two `GW_PARAMS` lines).
fn prelude_lines() -> usize {
    PRELUDE.matches('\n').count() + 1 + 2
}

/// NVRTC's `log` for program `program` (`<kernel>.cu`) with each `<program>(<line>)` put in the
/// coordinates of the kernel's own source, or named as a line of the generated prelude.
pub(crate) fn log_in_source_lines(log: &str, program: &str) -> String {
    let prelude = prelude_lines();
    let opening = format!("{program}(");
    let mut out = String::with_capacity(log.len());
    let mut rest = log;
    while let Some(at) = rest.find(&opening) {
        let after = &rest[at + opening.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let line = after[..digits].parse::<usize>().ok();
        match line.filter(|_| after[digits..].starts_with(')')) {
            Some(line) => {
                out.push_str(&rest[..at]);
                if line > prelude {
                    out.push_str(&format!("{program} line {} of its source", line - prelude));
                } else {
                    out.push_str(&format!("generated prelude line {line}"));
                }
                rest = &after[digits + 1..];
            }
            None => {
                out.push_str(&rest[..at + opening.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuworld_hal::library::{self, matmul, reduce};

    #[test]
    fn parameters_follow_the_launch_order_of_buffers_lengths_and_typed_scalars() {
        let expected = [
            (&library::NOOP, "GW_COUNT_PARAM_ONLY"),
            (
                &library::FILL,
                "float* out, unsigned int out_len, float value GW_COUNT_PARAM",
            ),
            (
                &library::COPY,
                "const unsigned int* src, unsigned int src_len, unsigned int* dst, unsigned int dst_len \
                 GW_COUNT_PARAM",
            ),
            (
                &library::STENCIL,
                "const float* u, unsigned int u_len, float* out, unsigned int out_len, \
                 unsigned int width, unsigned int height, float alpha GW_COUNT_PARAM",
            ),
            (
                &reduce::REDUCE_SUM_TREE,
                "const float* input, unsigned int input_len, float* output, unsigned int output_len, \
                 unsigned int n GW_COUNT_PARAM",
            ),
            (
                &matmul::MATMUL_TILED16,
                "const float* a, unsigned int a_len, const float* b, unsigned int b_len, float* c, \
                 unsigned int c_len, unsigned int m, unsigned int n, unsigned int k GW_COUNT_PARAM",
            ),
        ];
        for (kernel, parameters) in expected {
            assert_eq!(parameter_list(kernel), parameters, "{}", kernel.id);
        }
    }

    #[test]
    fn a_read_only_buffer_is_a_const_pointer() {
        use gpuworld_hal::kernel::{Param, Signature};
        static SHIFT: KernelDef = KernelDef {
            id: "test.shift",
            name: "shift",
            signature: Signature {
                buffers: &[Param::f32("x").read_only(), Param::f32("out").write_only()],
                scalars: &[Param::f32("offset")],
                cube_dim: [64, 1, 1],
            },
            sources: &[],
        };
        assert_eq!(
            parameter_list(&SHIFT),
            "const float* x, unsigned int x_len, float* out, unsigned int out_len, \
             float offset GW_COUNT_PARAM"
        );
    }

    #[test]
    fn an_atomic_buffer_is_a_plain_pointer_that_atomic_add_takes() {
        use gpuworld_hal::kernel::{Param, Signature};
        static COUNTS: KernelDef = KernelDef {
            id: "test.counts",
            name: "counts",
            signature: Signature {
                buffers: &[Param::u32("counts").atomic(), Param::i32("low").atomic()],
                scalars: &[],
                cube_dim: [64, 1, 1],
            },
            sources: &[],
        };
        assert_eq!(
            parameter_list(&COUNTS),
            "unsigned int* counts, unsigned int counts_len, int* low, unsigned int low_len \
             GW_COUNT_PARAM"
        );
    }

    #[test]
    fn every_library_kernel_has_a_cuda_function_of_its_name_taking_the_generated_parameters() {
        for kernel in library::ALL.iter().copied() {
            let text = cuda_text(kernel).unwrap_or_else(|| panic!("{} has no CUDA", kernel.id));
            let header = format!("extern \"C\" __global__ void {}(GW_PARAMS)", kernel.name);
            assert!(
                text.contains(&header),
                "{}: no `{header}` in\n{text}",
                kernel.id
            );
            assert!(
                text.starts_with(&format!(
                    "#undef GW_PARAMS\n#define GW_PARAMS {}\n",
                    parameter_list(kernel)
                )),
                "{}",
                kernel.id
            );
        }
    }

    #[test]
    fn nvrtc_lines_are_mapped_to_the_source_and_the_prelude() {
        let prelude = prelude_lines();
        let log = format!(
            "shift.cu({}): error: identifier \"ofset\" is undefined\nshift.cu(3): warning\n\
             other.cu(9)",
            prelude + 2
        );
        assert_eq!(
            log_in_source_lines(&log, "shift.cu"),
            "shift.cu line 2 of its source: error: identifier \"ofset\" is undefined\n\
             generated prelude line 3: warning\nother.cu(9)"
        );
    }
}

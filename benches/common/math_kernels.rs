//! The exact math's cost against the device's own functions: per function, a kernel that adds
//! `f(x + j / 32)` over 16 values of `j` for each element (`x` in [0.1, 2.1], in every function's
//! domain), once with the deterministic version (`sin`, `/`, ..: the same bits on every backend)
//! and once with the hardware's (`native_sin`, ..: the device's precision). `/` has no `native_`
//! method: its hardware version is written by hand (WGSL's `/`, which WGSL allows 2.5 ULP, and
//! CUDA's `__fdividef`).

#![allow(dead_code)]

use gpuworld::kernel::{CpuSource, CudaSource, KernelDef, Param, Signature, WgslSource};

/// A kernel `$name` whose element `i` is the sum over `j` of `$f`, with `$a` = `x[i] + j / 32`.
macro_rules! math_kernel {
    ($name:ident, $a:ident, $($f:tt)*) => {
        #[gpuworld::kernel(cube_dim = 256)]
        pub fn $name(x: &[f32], #[write_only] out: &mut [f32]) {
            let i = global_index();
            if i < out.len() {
                let v = x[i];
                let mut acc = 0.0;
                for j in 0..16 {
                    let $a = v + (j as f32) * 0.03125;
                    acc += $($f)*;
                }
                out[i] = acc;
            }
        }
    };
}

math_kernel!(exact_sin, a, a.sin());
math_kernel!(native_sin, a, a.native_sin());
math_kernel!(exact_cos, a, a.cos());
math_kernel!(native_cos, a, a.native_cos());
math_kernel!(exact_exp, a, a.exp());
math_kernel!(native_exp, a, a.native_exp());
math_kernel!(exact_ln, a, a.ln());
math_kernel!(native_ln, a, a.native_ln());
math_kernel!(exact_tanh, a, a.tanh());
math_kernel!(native_tanh, a, a.native_tanh());
math_kernel!(exact_powf, a, a.powf(1.3));
math_kernel!(native_powf, a, a.native_powf(1.3));
math_kernel!(exact_sqrt, a, a.sqrt());
math_kernel!(native_sqrt, a, a.native_sqrt());
math_kernel!(exact_div, a, v / a);

/// `/` with the hardware's division: what `exact_div` computes, written by hand.
pub static NATIVE_DIV: KernelDef = KernelDef {
    id: "bench.math.native_div",
    name: "native_div",
    signature: Signature {
        buffers: &[Param::f32("x").read_only(), Param::f32("out").write_only()],
        scalars: &[],
        cube_dim: [256, 1, 1],
    },
    sources: &[
        &CpuSource(|cube, io| {
            for i in cube.units_1d(io.len32(1)) {
                let v = io.load_f32(0, i);
                let acc = (0..16).fold(0.0f32, |acc, j| acc + v / (v + j as f32 * 0.03125));
                io.store_f32(1, i, acc);
            }
        }),
        &WgslSource(
            "@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) cube: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
        @builtin(local_invocation_index) unit: u32) {
    let i = (cube.x + count.x * (cube.y + count.y * cube.z)) * 256u + unit;
    if i < arrayLength(&out) {
        let v = x[i];
        var acc = 0.0;
        for (var j = 0u; j < 16u; j = j + 1u) {
            acc = acc + v / (v + f32(j) * 0.03125);
        }
        out[i] = acc;
    }
}
",
        ),
        &CudaSource(
            r#"
extern "C" __global__ void native_div(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < out_len) {
            const float v = x[i];
            float acc = 0.0f;
            for (unsigned int j = 0u; j < 16u; ++j) acc += __fdividef(v, v + (float)j * 0.03125f);
            out[i] = acc;
        }
    }
}
"#,
        ),
    ],
};

/// Each function's name, its exact kernel and its hardware one.
pub static PAIRS: [(&str, &KernelDef, &KernelDef); 8] = [
    ("sin", &exact_sin, &native_sin),
    ("cos", &exact_cos, &native_cos),
    ("exp", &exact_exp, &native_exp),
    ("ln", &exact_ln, &native_ln),
    ("tanh", &exact_tanh, &native_tanh),
    ("powf", &exact_powf, &native_powf),
    ("sqrt", &exact_sqrt, &native_sqrt),
    ("/", &exact_div, &NATIVE_DIV),
];

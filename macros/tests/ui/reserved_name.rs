use gpuworld_macros::kernel;

// `signed` is a Rust identifier but a CUDA C++ keyword: the kernel's name appears as written.
#[kernel]
fn signed(out: &mut [i32]) {
    let i = global_index();
    out[i] = 0;
}

#[kernel]
fn scales(scalars: &mut [f32]) {
    let i = global_index();
    scalars[i] = 0.0;
}

// A WGSL built-in and type: the binding is declared under the parameter's name.
#[kernel]
fn casts(bitcast: &mut [f32], i32: &[f32]) {
    let i = global_index();
    bitcast[i] = i32[i];
}

fn main() {}

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

fn main() {}

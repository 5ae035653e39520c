use gpuworld_macros::kernel;

#[kernel(workgroup_size = 64)]
fn named_as_wgsl(out: &mut [f32]) {
    let i = global_index();
    out[i] = 1.0;
}

fn main() {}

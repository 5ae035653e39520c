use gpuworld_macros::kernel;

#[kernel(cube_dim = [64, 32, 1])]
fn too_big(out: &mut [f32]) {
    let i = global_index();
    out[i] = 1.0;
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel(cube_dim = 64)]
fn divergent(x: &mut [f32]) {
    let i = global_index();
    if i < x.len() {
        x[i] = 1.0;
        sync_cube();
    }
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel(cube_dim = 64)]
fn early_exit(x: &mut [f32]) {
    let i = global_index();
    if i >= x.len() {
        return;
    }
    sync_cube();
    x[i] = 2.0;
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel(cube_dim = 64)]
fn divergent_loop(x: &mut [f32]) {
    for k in 0..unit() {
        x[k] = 0.0;
        sync_cube();
    }
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel(cube_dim = 64)]
fn leaves_early(x: &mut [f32]) {
    let tile = shared::<f32, 64>();
    for k in 0..4 {
        tile[unit()] = x[k];
        if tile[0] > 1.0 {
            break;
        }
        sync_cube();
    }
}

fn main() {}

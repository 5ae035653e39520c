use gpuworld_macros::kernel;

#[kernel]
fn everyone_stores_to_zero(x: &[f32], total: &mut [f32]) {
    let i = global_index();
    let mut k = i;
    if x[i] > 0.0 {
        k = 0;
    }
    total[k] = x[i];
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel]
fn stores_a_vector(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    let v = vec2(x[i], 1.0);
    out[i] = v;
}

fn main() {}

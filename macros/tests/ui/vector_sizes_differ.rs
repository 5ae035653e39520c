use gpuworld_macros::kernel;

#[kernel]
fn adds_two_sizes(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    let a = vec2(x[i], 1.0);
    let b = vec3(x[i], 1.0, 2.0);
    let c = a + b;
    out[i] = c.x;
}

fn main() {}

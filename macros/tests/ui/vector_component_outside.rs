use gpuworld_macros::kernel;

#[kernel]
fn reads_a_fourth_component(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    let a = vec2(x[i], 1.0);
    out[i] = a.w;
}

fn main() {}

use gpuworld_macros::kernel;

#[kernel(instances(scale_f32 = (f32, 4)))]
fn scale<T>(x: &[T], out: &mut [T], factor: T) {
    let i = global_index();
    out[i] = x[i] * factor;
}

fn main() {}

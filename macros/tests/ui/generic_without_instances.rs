use gpuworld_macros::kernel;

#[kernel]
fn scale<T>(x: &[T], out: &mut [T], factor: T) {
    let i = global_index();
    out[i] = x[i] * factor;
}

fn main() {}

#[gpuworld_macros::kernels]
mod helpers {
    #[gpuworld_macros::func]
    fn pick<T>(a: T, _b: T) -> T {
        a
    }

    #[gpuworld_macros::kernel]
    fn picks(xs: &[f32], out: &mut [f32]) {
        let i = global_index();
        out[i] = pick(xs[i], 1.0);
    }
}

fn main() {}

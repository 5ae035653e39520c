#[gpuworld_macros::kernels]
mod helpers {
    #[gpuworld_macros::func]
    fn twice(x: f32) -> f32 {
        let mut y = x;
        y + y
    }

    #[gpuworld_macros::kernel]
    fn doubles(xs: &[f32], out: &mut [f32]) {
        let i = global_index();
        out[i] = twice(xs[i]);
    }
}

fn main() {}

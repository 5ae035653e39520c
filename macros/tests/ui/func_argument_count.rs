#[gpuworld_macros::kernels]
mod helpers {
    #[gpuworld_macros::func]
    fn lerp(a: f32, b: f32, t: f32) -> f32 {
        a + (b - a) * t
    }

    #[gpuworld_macros::kernel]
    fn blends(xs: &[f32], out: &mut [f32]) {
        let i = global_index();
        out[i] = lerp(xs[i], 1.0);
    }
}

fn main() {}

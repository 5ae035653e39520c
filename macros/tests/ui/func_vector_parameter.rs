#[gpuworld_macros::kernels]
mod helpers {
    #[gpuworld_macros::func]
    fn squared_length(v: [f32; 2]) -> f32 {
        v[0] * v[0] + v[1] * v[1]
    }

    #[gpuworld_macros::kernel]
    fn lengths(xs: &[f32], out: &mut [f32]) {
        let i = global_index();
        let v = vec2(xs[i], 1.0);
        out[i] = squared_length(v);
    }
}

fn main() {}

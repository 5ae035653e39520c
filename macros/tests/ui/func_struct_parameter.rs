#[gpuworld_macros::kernels]
mod helpers {
    #[repr(C)]
    pub struct Particle {
        pub x: f32,
        pub v: f32,
    }

    #[gpuworld_macros::func]
    fn moved(p: Particle, dt: f32) -> f32 {
        p.x + p.v * dt
    }

    #[gpuworld_macros::kernel]
    fn positions(ps: &[Particle], out: &mut [f32], dt: f32) {
        let i = global_index();
        out[i] = moved(ps[i], dt);
    }
}

fn main() {}

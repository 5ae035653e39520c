#[gpuworld_macros::kernels]
mod particles {
    #[repr(C)]
    pub struct Particle {
        pub position: [f32; 3],
        pub mass: f32,
    }

    #[gpuworld_macros::kernel]
    fn weigh(ps: &[Particle], out: &mut [f32]) {
        let i = global_index();
        out[i] = ps[i].mass;
    }
}

fn main() {}

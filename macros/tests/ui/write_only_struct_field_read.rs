#[gpuworld_macros::kernels]
mod moving {
    #[repr(C)]
    pub struct Particle {
        pub x: f32,
        pub v: f32,
    }

    #[gpuworld_macros::kernel]
    fn reads_a_written_field(#[write_only] ps: &mut [Particle], dt: f32) {
        let i = global_index();
        ps[i].x = ps[i].x + ps[i].v * dt;
    }
}

fn main() {}

//! The particles of `render_particles` and how they are drawn, shared with its test
//! (`tests/render_particles.rs` includes this file): the integrator of `bevy_particles` as one
//! `#[gpuworld::kernel]` (the same bits on every backend), a point pipeline that draws positions
//! from two vertex buffers, and an offscreen frame read back as RGBA.

use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Handle, Result, wgpu};

/// Image side of the offscreen frame, in pixels.
pub const SIDE: u32 = 512;

/// What one point adds to a pixel's red, green and blue (additive blending, saturating): dense
/// regions go from blue to white.
pub const POINT_COLOR: [u8; 3] = [8, 16, 32];

/// One explicit Euler step (dt = 1/128) under gravity (0.5) in the unit box, bouncing off its
/// walls: `bevy_particles`' integrator, its constants folded in so a launch uploads no scalars.
#[gpuworld::kernel(cube_dim = 256)]
pub fn integrate(px: &mut [f32], py: &mut [f32], vx: &mut [f32], vy: &mut [f32]) {
    let i = global_index();
    if i < px.len() {
        let dt = 0.0078125;
        let mut u = vx[i];
        let mut w = vy[i] - 0.5 * dt;
        let mut x = px[i] + u * dt;
        let mut y = py[i] + w * dt;
        if x < 0.0 {
            x = -x;
            u = -u;
        }
        if x > 1.0 {
            x = 2.0 - x;
            u = -u;
        }
        if y < 0.0 {
            y = -y;
            w = -w;
        }
        if y > 1.0 {
            y = 2.0 - y;
            w = -w;
        }
        px[i] = x;
        py[i] = y;
        vx[i] = u;
        vy[i] = w;
    }
}

/// A deterministic spread of `count` values in `[0, 1)` for `seed`: a 32-bit integer hash
/// (lowbias32) of index and seed, so that spreads of different seeds are independent.
pub fn spread(count: usize, seed: u32) -> Vec<f32> {
    (0..count as u32)
        .map(|i| {
            let mut h = i ^ seed.wrapping_mul(0x9e37_79b9);
            h ^= h >> 16;
            h = h.wrapping_mul(0x7feb_352d);
            h ^= h >> 15;
            h = h.wrapping_mul(0x846c_a68b);
            h ^= h >> 16;
            (h >> 8) as f32 / (1 << 24) as f32
        })
        .collect()
}

/// The particle buffers on the device.
pub struct Particles {
    /// Horizontal positions in `[0, 1]`.
    pub px: Handle,
    /// Vertical positions in `[0, 1]`, up.
    pub py: Handle,
    vx: Handle,
    vy: Handle,
    /// How many particles.
    pub count: usize,
}

impl Particles {
    /// `count` particles from `seed`, uploaded once: positions in the upper half of the box,
    /// velocities of up to a quarter of the box per unit of time either way.
    pub fn new<B: Backend>(client: &ComputeClient<B>, count: usize, seed: u32) -> Particles {
        let upload = |values: Vec<f32>| client.create(bytemuck::cast_slice::<f32, u8>(&values));
        let velocity = |seed| {
            spread(count, seed)
                .iter()
                .map(|v| (v - 0.5) * 0.5)
                .collect()
        };
        Particles {
            px: upload(spread(count, seed)),
            py: upload(
                spread(count, seed ^ 0x9e37)
                    .iter()
                    .map(|v| 0.5 + v * 0.5)
                    .collect(),
            ),
            vx: upload(velocity(seed ^ 0x7f4a)),
            vy: upload(velocity(seed ^ 0x2545)),
            count,
        }
    }

    /// Enqueues one integration step. Never ticks.
    pub fn step<B: Backend>(&self, client: &ComputeClient<B>) -> Result<()> {
        client.launch(
            &integrate,
            CubeCount::covering(self.count as u64, 256),
            Bindings::new()
                .buffer(&self.px)
                .buffer(&self.py)
                .buffer(&self.vx)
                .buffer(&self.vy),
        )
    }
}

/// A render pipeline drawing one point per particle, its position from two `f32` vertex buffers
/// (x and y), blended additively.
pub struct PointPipeline {
    pipeline: wgpu::RenderPipeline,
}

impl PointPipeline {
    /// The pipeline for targets of `format`.
    pub fn new(device: &wgpu::Device, format: wgpu::TextureFormat) -> PointPipeline {
        let [r, g, b] = POINT_COLOR.map(|c| f32::from(c) / 255.0);
        let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("points"),
            source: wgpu::ShaderSource::Wgsl(
                format!(
                    "@vertex fn vs(@location(0) x: f32, @location(1) y: f32) -> @builtin(position) vec4<f32> {{
    return vec4<f32>(x * 2.0 - 1.0, y * 2.0 - 1.0, 0.0, 1.0);
}}
@fragment fn fs() -> @location(0) vec4<f32> {{
    return vec4<f32>({r:?}, {g:?}, {b:?}, 1.0);
}}"
                )
                .into(),
            ),
        });
        let one = wgpu::BlendComponent {
            src_factor: wgpu::BlendFactor::One,
            dst_factor: wgpu::BlendFactor::One,
            operation: wgpu::BlendOperation::Add,
        };
        let attributes = [
            [wgpu::VertexAttribute {
                format: wgpu::VertexFormat::Float32,
                offset: 0,
                shader_location: 0,
            }],
            [wgpu::VertexAttribute {
                format: wgpu::VertexFormat::Float32,
                offset: 0,
                shader_location: 1,
            }],
        ];
        let buffers = attributes.each_ref().map(|attributes| {
            Some(wgpu::VertexBufferLayout {
                array_stride: 4,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes,
            })
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("points"),
            layout: None,
            vertex: wgpu::VertexState {
                module: &shader,
                entry_point: Some("vs"),
                compilation_options: Default::default(),
                buffers: &buffers,
            },
            primitive: wgpu::PrimitiveState {
                topology: wgpu::PrimitiveTopology::PointList,
                ..Default::default()
            },
            depth_stencil: None,
            multisample: Default::default(),
            fragment: Some(wgpu::FragmentState {
                module: &shader,
                entry_point: Some("fs"),
                compilation_options: Default::default(),
                targets: &[Some(wgpu::ColorTargetState {
                    format,
                    blend: Some(wgpu::BlendState {
                        color: one,
                        alpha: one,
                    }),
                    write_mask: wgpu::ColorWrites::ALL,
                })],
            }),
            multiview_mask: None,
            cache: None,
        });
        PointPipeline { pipeline }
    }

    /// Records a pass clearing `view` to black and drawing `count` points from `xs` and `ys`.
    pub fn draw(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
        xs: wgpu::BufferSlice<'_>,
        ys: wgpu::BufferSlice<'_>,
        count: u32,
    ) {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("particles"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_vertex_buffer(0, xs);
        pass.set_vertex_buffer(1, ys);
        pass.draw(0..count, 0..1);
    }
}

/// An offscreen RGBA8 target of `SIDE`² pixels and the buffer its frames are copied to.
pub struct Offscreen {
    texture: wgpu::Texture,
    /// The view to draw into.
    pub view: wgpu::TextureView,
    readback: wgpu::Buffer,
}

/// The texture format of [`Offscreen`].
pub const OFFSCREEN_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

impl Offscreen {
    /// A target on `device`.
    pub fn new(device: &wgpu::Device) -> Offscreen {
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("offscreen"),
            size: wgpu::Extent3d {
                width: SIDE,
                height: SIDE,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: OFFSCREEN_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = texture.create_view(&Default::default());
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("offscreen readback"),
            size: u64::from(SIDE * SIDE * 4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Offscreen {
            texture,
            view,
            readback,
        }
    }

    /// Records the copy of the frame drawn into the readback buffer.
    pub fn copy_out(&self, encoder: &mut wgpu::CommandEncoder) {
        // A row of SIDE RGBA8 pixels is a multiple of COPY_BYTES_PER_ROW_ALIGNMENT (256).
        encoder.copy_texture_to_buffer(
            self.texture.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &self.readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(SIDE * 4),
                    rows_per_image: Some(SIDE),
                },
            },
            wgpu::Extent3d {
                width: SIDE,
                height: SIDE,
                depth_or_array_layers: 1,
            },
        );
    }

    /// The frame copied out, RGBA8 row by row from the top, once the device is done with it.
    pub fn pixels(&self, device: &wgpu::Device) -> std::result::Result<Vec<u8>, String> {
        let (sender, receiver) = std::sync::mpsc::channel();
        self.readback
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("waiting for the frame: {e}"))?;
        receiver
            .recv()
            .map_err(|e| format!("the frame's mapping never finished: {e}"))?
            .map_err(|e| format!("mapping the frame: {e}"))?;
        let pixels = self
            .readback
            .slice(..)
            .get_mapped_range()
            .map_err(|e| format!("reading the frame: {e}"))?
            .to_vec();
        self.readback.unmap();
        Ok(pixels)
    }
}

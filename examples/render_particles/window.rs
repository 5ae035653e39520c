//! render_particles' windowed mode: winit's event loop, a surface on the renderer's device, a
//! frame per redraw.

use super::*;
use winit::application::ApplicationHandler;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::window::{Window, WindowId};

struct Shown {
    window: Arc<Window>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    renderer: Renderer,
    pipeline: PointPipeline,
    feed: Box<dyn Feed>,
    tally: Tally,
}

struct App<'a> {
    options: &'a Options,
    shown: Option<Shown>,
    error: Option<String>,
}

impl Shown {
    fn new(event_loop: &ActiveEventLoop, options: &Options) -> Result<Shown, String> {
        let attributes = Window::default_attributes()
            .with_title("gpuworld: render_particles")
            .with_inner_size(winit::dpi::PhysicalSize::new(scene::SIDE, scene::SIDE));
        let window = Arc::new(
            event_loop
                .create_window(attributes)
                .map_err(|e| format!("no window: {e}"))?,
        );
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let surface = instance
            .create_surface(window.clone())
            .map_err(|e| format!("no surface for the window: {e}"))?;
        let renderer = Renderer::new(&instance, Some(&surface))?;
        let size = window.inner_size();
        let config = surface
            .get_default_config(&renderer.adapter, size.width.max(1), size.height.max(1))
            .ok_or("the adapter cannot present to this window")?;
        surface.configure(&renderer.device, &config);
        let pipeline = PointPipeline::new(&renderer.device, config.format);
        let feed = feed(options, &renderer)?;
        let tally = Tally::new(feed.as_ref());
        Ok(Shown {
            window,
            surface,
            config,
            renderer,
            pipeline,
            feed,
            tally,
        })
    }

    /// Draws one frame to the window; false when the frame was skipped.
    fn redraw(&mut self) -> Result<bool, String> {
        let texture = match self.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(texture)
            | wgpu::CurrentSurfaceTexture::Suboptimal(texture) => texture,
            wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                self.surface.configure(&self.renderer.device, &self.config);
                return Ok(false);
            }
            wgpu::CurrentSurfaceTexture::Timeout | wgpu::CurrentSurfaceTexture::Occluded => {
                return Ok(false);
            }
            other => return Err(format!("no frame to draw into: {other:?}")),
        };
        let view = texture.texture.create_view(&Default::default());
        run_frame(
            &self.renderer,
            &self.pipeline,
            self.feed.as_mut(),
            &view,
            &mut self.tally,
        )?;
        self.window.pre_present_notify();
        self.renderer.queue.present(texture);
        Ok(true)
    }
}

impl ApplicationHandler for App<'_> {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.shown.is_some() {
            return;
        }
        match Shown::new(event_loop, self.options) {
            Ok(shown) => {
                shown.window.request_redraw();
                self.shown = Some(shown);
            }
            Err(error) => {
                self.error = Some(error);
                event_loop.exit();
            }
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _: WindowId, event: WindowEvent) {
        let Some(shown) = self.shown.as_mut() else {
            return;
        };
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(size) if size.width > 0 && size.height > 0 => {
                shown.config.width = size.width;
                shown.config.height = size.height;
                shown
                    .surface
                    .configure(&shown.renderer.device, &shown.config);
            }
            WindowEvent::RedrawRequested => {
                if let Err(error) = shown.redraw() {
                    self.error = Some(error);
                    event_loop.exit();
                    return;
                }
                if self.options.frames.is_some_and(|n| shown.tally.frames >= n) {
                    event_loop.exit();
                } else {
                    shown.window.request_redraw();
                }
            }
            _ => {}
        }
    }
}

/// Shows the particles until the window closes (or `--frames` have been drawn).
pub fn run(options: &Options) -> Result<(), String> {
    let event_loop = EventLoop::new().map_err(|e| format!("no event loop (no display?): {e}"))?;
    let mut app = App {
        options,
        shown: None,
        error: None,
    };
    event_loop
        .run_app(&mut app)
        .map_err(|e| format!("the event loop failed: {e}"))?;
    if let Some(error) = app.error {
        return Err(error);
    }
    if let Some(shown) = &app.shown {
        shown.tally.print(shown.feed.as_ref(), options);
    }
    Ok(())
}

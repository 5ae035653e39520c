//! gpuworld on Bevy's render device (issue 48): [`GpuworldRenderPlugin`] opens gpuworld's wgpu
//! backend on the device, queue and adapter of Bevy's renderer (`RenderDevice`, `RenderQueue`,
//! `RenderAdapter`) and drives it with gpuworld's [`GpuworldPlugin`] in the main world, so the
//! app's systems launch on the [`Gpu<WgpuBackend>`] resource as with any gpuworld Bevy app. A
//! [`LeasedBuffers`] component on a main-world entity names handles whose bytes the render world
//! draws: every frame, extraction leases them (one submit of gpuworld's stream for all) and puts
//! an [`ExtractedLeases`] on the entity's render-world twin, with each handle's `wgpu::Buffer`,
//! offset and size to bind as a vertex, index, uniform or storage buffer in the user's own
//! render systems. The leases are dropped in `RenderSystems::Cleanup`, after the frame is
//! submitted, so gpuworld's memory under them is neither reused nor moved while the frame may
//! read it. No byte crosses the host.
//!
//! Ordering is the one queue's (`docs/render.md`): extraction's lease submits the frame's
//! gpuworld work before the render world submits its frame; the next frame's gpuworld work is
//! submitted after it, as long as the main world's schedule does not run while the render world
//! renders (Bevy's `PipelinedRenderingPlugin` runs them at once: then a frame may show the
//! positions of the next step; memory stays safe, the pins hold).
//!
//! bevy_render 0.20 needs Rust 1.97.1 (its `wesl` dependency declares it); on an older toolchain
//! build with `--ignore-rust-version` (README.md).

use bevy_app::{App, AppExit, Plugin};
use bevy_ecs::prelude::*;
use bevy_render::renderer::{RenderAdapter, RenderDevice, RenderQueue};
use bevy_render::sync_world::{RenderEntity, SyncToRenderWorld};
use bevy_render::{Extract, ExtractSchedule, Render, RenderApp, RenderSystems};
use gpuworld::bevy::{Gpu, GpuworldPlugin};
use gpuworld::{ComputeClient, Driver, Handle, RenderLease, WgpuBackend, WgpuConfig};
use std::sync::Arc;

pub use gpuworld;

/// Changes the [`GpuworldPlugin`] the render plugin installs (ticks per frame, frames in
/// flight, its schedule).
type Configure =
    dyn Fn(GpuworldPlugin<WgpuBackend>) -> GpuworldPlugin<WgpuBackend> + Send + Sync + 'static;

/// Runs gpuworld on Bevy's render device and hands [`LeasedBuffers`] to the render world each
/// frame (see the crate documentation). Add it after Bevy's `RenderPlugin` (`DefaultPlugins`):
/// it opens gpuworld in `Plugin::finish`, once the renderer has its device.
pub struct GpuworldRenderPlugin {
    config: WgpuConfig,
    configure: Option<Arc<Configure>>,
}

impl std::fmt::Debug for GpuworldRenderPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuworldRenderPlugin")
            .field("config", &self.config)
            .field("configured", &self.configure.is_some())
            .finish()
    }
}

impl Default for GpuworldRenderPlugin {
    fn default() -> Self {
        GpuworldRenderPlugin::new(WgpuConfig::default())
    }
}

impl GpuworldRenderPlugin {
    /// The plugin with gpuworld's wgpu settings `config` (its adapter and backend choice are
    /// not read: the renderer's device is used). `gpuworld.toml`'s scheduler and memory settings
    /// apply, as for `gpuworld::wgpu_client_on_device`.
    pub fn new(config: WgpuConfig) -> GpuworldRenderPlugin {
        GpuworldRenderPlugin {
            config,
            configure: None,
        }
    }

    /// Changes the [`GpuworldPlugin`] installed over the client (by default
    /// `GpuworldPlugin::new`: `PostUpdate`, one tick a frame).
    pub fn with_plugin(
        mut self,
        configure: impl Fn(GpuworldPlugin<WgpuBackend>) -> GpuworldPlugin<WgpuBackend>
        + Send
        + Sync
        + 'static,
    ) -> GpuworldRenderPlugin {
        self.configure = Some(Arc::new(configure));
        self
    }
}

/// Why gpuworld could not be opened on the renderer's device: inserted as a resource of the
/// main world instead of [`Gpu<WgpuBackend>`], logged, and the app is asked to exit with an
/// error (as Bevy's default render error policy does).
#[derive(Resource, Debug, Clone)]
pub struct GpuworldRenderUnavailable {
    /// What went wrong, in words.
    pub reason: String,
}

impl Plugin for GpuworldRenderPlugin {
    fn build(&self, app: &mut App) {
        let Some(render_app) = app.get_sub_app_mut(RenderApp) else {
            // No renderer (no `RenderPlugin` before this plugin, or no adapter): `finish`
            // reports it.
            return;
        };
        render_app
            .add_systems(ExtractSchedule, extract_leases)
            .add_systems(Render, release_leases.in_set(RenderSystems::Cleanup));
    }

    fn finish(&self, app: &mut App) {
        match open_on_renderer(app.world(), self.config.clone()) {
            Ok(client) => {
                let plugin = GpuworldPlugin::new(client);
                let plugin = match &self.configure {
                    Some(configure) => configure(plugin),
                    None => plugin,
                };
                // Built here, not added: the client exists only once the renderer has its
                // device, after every plugin's `build`.
                plugin.build(app);
            }
            Err(reason) => {
                tracing::error!(target: "gpuworld::bevy", %reason, "gpuworld cannot run on the renderer's device");
                app.world_mut()
                    .insert_resource(GpuworldRenderUnavailable { reason });
                app.world_mut().write_message(AppExit::error());
            }
        }
    }
}

/// gpuworld's client on the render device the main world holds after `RenderPlugin::finish`.
fn open_on_renderer(
    world: &World,
    config: WgpuConfig,
) -> Result<ComputeClient<WgpuBackend>, String> {
    let missing = |what: &str| {
        format!(
            "the main world has no {what}: add GpuworldRenderPlugin after Bevy's RenderPlugin, \
             on a machine where the renderer found an adapter"
        )
    };
    let device = world
        .get_resource::<RenderDevice>()
        .ok_or_else(|| missing("RenderDevice"))?;
    let queue = world
        .get_resource::<RenderQueue>()
        .ok_or_else(|| missing("RenderQueue"))?;
    let adapter = world
        .get_resource::<RenderAdapter>()
        .ok_or_else(|| missing("RenderAdapter"))?;
    // The frame ticks the runtime (`GpuworldPlugin`), and a lease ticks it when it must.
    gpuworld::wgpu_client_on_device(
        adapter,
        device.wgpu_device().clone(),
        (**queue).clone(),
        config,
        Driver::Manual,
    )
    .map_err(|error| error.to_string())
}

/// Handles of a main-world entity whose bytes the render world reads this frame: extraction
/// leases them and puts an [`ExtractedLeases`] on the entity's render-world twin, in this order.
#[derive(Component, Clone, Debug)]
#[require(SyncToRenderWorld)]
pub struct LeasedBuffers {
    /// The handles, in the order their leases come.
    pub handles: Vec<Handle>,
}

impl LeasedBuffers {
    /// Leases of `handles` each frame, in this order.
    pub fn new(handles: impl IntoIterator<Item = Handle>) -> LeasedBuffers {
        LeasedBuffers {
            handles: handles.into_iter().collect(),
        }
    }

    /// A lease of `handle` each frame.
    pub fn one(handle: Handle) -> LeasedBuffers {
        LeasedBuffers {
            handles: vec![handle],
        }
    }
}

/// This frame's leases of a [`LeasedBuffers`] entity's handles, on its render-world twin, in
/// the component's order: bind `lease.slice()` (`set_vertex_buffer`, `set_index_buffer`) or
/// `lease.binding()` (a bind group entry) in the frame. Dropped in `RenderSystems::Cleanup`,
/// after the frame is submitted.
#[derive(Component, Debug)]
pub struct ExtractedLeases {
    /// One lease per handle.
    pub leases: Vec<RenderLease>,
}

impl ExtractedLeases {
    /// The lease of the `index`-th handle, if there is one.
    pub fn get(&self, index: usize) -> Option<&RenderLease> {
        self.leases.get(index)
    }
}

/// Leases every [`LeasedBuffers`] entity's handles, all with one submit of gpuworld's stream;
/// an entity whose leases fail is logged and gets none this frame (the others still do).
fn extract_leases(
    gpu: Extract<Option<Res<Gpu<WgpuBackend>>>>,
    entities: Extract<Query<(RenderEntity, &LeasedBuffers)>>,
    mut commands: Commands,
) {
    let Some(gpu) = gpu.as_deref() else {
        return;
    };
    if entities.is_empty() {
        return;
    }
    let all = entities.iter().flat_map(|(_, leased)| &leased.handles);
    match gpu.leases(all) {
        Ok(mut leases) => {
            for (render_entity, leased) in &entities {
                let rest = leases.split_off(leased.handles.len());
                let mine = std::mem::replace(&mut leases, rest);
                commands
                    .entity(render_entity)
                    .try_insert(ExtractedLeases { leases: mine });
            }
        }
        // One failing handle fails the batch: lease entity by entity to keep the others.
        Err(batch) => {
            tracing::debug!(target: "gpuworld::bevy", error = %batch, "leasing entity by entity");
            for (render_entity, leased) in &entities {
                match gpu.leases(&leased.handles) {
                    Ok(leases) => {
                        commands
                            .entity(render_entity)
                            .try_insert(ExtractedLeases { leases });
                    }
                    Err(error) => {
                        tracing::warn!(target: "gpuworld::bevy", %error, entity = ?render_entity, "no leases this frame");
                    }
                }
            }
        }
    }
}

/// Drops this frame's leases once the frame is submitted (`RenderSystems::Cleanup` follows the
/// render graph's submit).
fn release_leases(leased: Query<Entity, With<ExtractedLeases>>, mut commands: Commands) {
    for entity in &leased {
        commands.entity(entity).remove::<ExtractedLeases>();
    }
}

//! What user systems and the plugin's own systems name: the client resource ([`Gpu`]) and the
//! system sets the plugin orders ([`GpuworldSet`]).

use crate::ComputeClient;
use bevy_ecs::prelude::*;
use gpuworld_systems::Backend;
use std::marker::PhantomData;
use std::ops::Deref;

/// The plugin's system sets, run in this order in the plugin's schedule.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GpuworldSet {
    /// User systems that launch, write and read; skipped in a frame whose runtime has its
    /// frames-in-flight limit reached under [`FramesFull::Skip`](super::FramesFull::Skip).
    Submit,
    /// Ends the frame (a fence) and ticks each runtime.
    Tick,
    /// Delivers finished readbacks to their entities ([`ReadbackComplete`](super::ReadbackComplete)).
    Readback,
}

/// The client of the runtime that `GpuworldPlugin<B, M>` drives, on [`PLUGIN_STREAM`](super::PLUGIN_STREAM); derefs
/// to [`ComputeClient`]. `M` tells several runtimes of one backend apart.
#[derive(Resource)]
pub struct Gpu<B: Backend, M: Send + Sync + 'static = ()> {
    client: ComputeClient<B>,
    marker: PhantomData<fn() -> M>,
}

impl<B: Backend, M: Send + Sync + 'static> std::fmt::Debug for Gpu<B, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Gpu").field(&self.client).finish()
    }
}

impl<B: Backend, M: Send + Sync + 'static> Gpu<B, M> {
    /// The resource of `client`, which the plugin inserts.
    pub(super) fn new(client: ComputeClient<B>) -> Gpu<B, M> {
        Gpu {
            client,
            marker: PhantomData,
        }
    }

    /// The client.
    pub fn client(&self) -> &ComputeClient<B> {
        &self.client
    }
}

impl<B: Backend, M: Send + Sync + 'static> Deref for Gpu<B, M> {
    type Target = ComputeClient<B>;

    fn deref(&self) -> &ComputeClient<B> {
        &self.client
    }
}

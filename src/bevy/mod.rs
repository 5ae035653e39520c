//! `GpuworldPlugin`: a gpuworld runtime advanced inside a Bevy app's schedule. The plugin puts
//! the client in a resource ([`Gpu`]) and adds three system sets to the schedule it is given
//! (`PostUpdate` by default, `FixedUpdate` for fixed timesteps): user systems that launch go in
//! [`GpuworldSet::Submit`], the runtime ticks in [`GpuworldSet::Tick`], and finished readbacks are
//! delivered to their entities in [`GpuworldSet::Readback`] (a repeating [`Readback`] keeps its
//! handles alive and several reads in flight, and reports any frame it skips). Each frame ends
//! with a fence, and a
//! frames-in-flight limit either waits for the oldest frame or skips the frame's submissions.
//! Several plugins drive several runtimes: each is keyed by its backend and a marker type.
//! `docs/architecture.md` (Bevy) says why this shape rather than a `SubApp`.

mod gpu;
mod readback;

pub use gpu::{Gpu, GpuworldSet};
pub use readback::{DEFAULT_READS_IN_FLIGHT, Readback, ReadbackComplete, ReadbackFailed};

use crate::{ComputeClient, Driver, FrameGraph, FrameMode, InFlight, StreamId};
use bevy_app::{App, Plugin, PostUpdate};
use bevy_ecs::intern::Interned;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;
use gpuworld_systems::{Backend, Error};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Frames a runtime may run ahead of the device by default, as a triple-buffered swapchain.
pub const DEFAULT_FRAMES_IN_FLIGHT: usize = 3;

/// The stream the plugin's client works on: fixed, so launches from systems on any thread of
/// Bevy's task pool land on one stream, in the order the schedule runs them.
pub const PLUGIN_STREAM: StreamId = StreamId { value: 0 };

/// The plugin's own steps around the user's sets.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PluginStep {
    /// Before `Submit`: retires finished frames and applies the frames-in-flight limit.
    Admit,
    /// After `Submit`: issues the reads of repeating [`Readback`]s.
    IssueReadbacks,
}

/// How many ticks a frame runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TickPolicy {
    /// This many ticks every frame (one by default); never waits on the device.
    PerFrame(u32),
    /// Ticks until nothing is in flight, or `budget` passed, waiting on the device between
    /// ticks; at least one tick.
    UntilIdle {
        /// Longest the frame spends ticking.
        budget: Duration,
    },
}

/// What `Submit` does when the frames-in-flight limit is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FramesFull {
    /// Wait for the oldest frame to finish (ticking, under `Driver::Manual`), then submit.
    Wait,
    /// Skip this frame's submissions (the `Submit` set does not run); the frame still ticks.
    Skip,
}

/// What the plugin of runtime `(B, M)` did so far: frames ended, submissions skipped, waits.
#[derive(Resource, Debug)]
pub struct GpuFrames<B: Backend, M: Send + Sync + 'static = ()> {
    /// Frames whose submissions ran and were fenced.
    pub ended: u64,
    /// Frames whose submissions were skipped (limit reached, [`FramesFull::Skip`]).
    pub skipped: u64,
    /// Frames that waited for an older frame before submitting ([`FramesFull::Wait`]).
    pub waited: u64,
    /// The last fault a frame the plugin waited for reported.
    pub last_fault: Option<Error>,
    /// Ticks run by the plugin's last frame.
    pub last_ticks: u32,
    /// Host time spent in the plugin's own systems so far (waiting for frames, ticking).
    pub time_in_plugin: Duration,
    /// Whether this frame's submissions run (decided before `Submit`).
    open: bool,
    config: FrameConfig,
    marker: PhantomData<fn() -> (B, M)>,
}

impl<B: Backend, M: Send + Sync + 'static> GpuFrames<B, M> {
    /// Whether this frame's `Submit` runs for this runtime.
    pub fn is_open(&self) -> bool {
        self.open
    }
}

#[derive(Clone, Copy, Debug)]
struct FrameConfig {
    ticks: TickPolicy,
    max_frames_in_flight: usize,
    when_full: FramesFull,
}

/// Drives one gpuworld runtime from a Bevy app: see the module documentation.
pub struct GpuworldPlugin<B: Backend, M: Send + Sync + 'static = ()> {
    client: ComputeClient<B>,
    schedule: Interned<dyn ScheduleLabel>,
    config: FrameConfig,
    /// Identical frames after which `GpuFrameGraph` replays (opt-in: `with_frame_graph`).
    frame_graph: Option<u32>,
    marker: PhantomData<fn() -> M>,
}

/// Opt-in replay of a frame's GPU work (issue 28, [`GpuworldPlugin::with_frame_graph`]): a
/// [`FrameGraph`] over the plugin's client. A `Submit` system queues its work through
/// `frames.run(|client| ...)`: after the configured number of identical frames the work is
/// captured, and later frames that queue the same work are one replay (one CUDA graph on CUDA
/// for launches on one stream); a frame that queues other work runs eagerly.
#[derive(Resource)]
pub struct GpuFrameGraph<B: Backend, M: Send + Sync + 'static = ()> {
    /// The frames.
    pub frames: FrameGraph<B>,
    marker: PhantomData<fn() -> M>,
}

impl<B: Backend, M: Send + Sync + 'static> std::fmt::Debug for GpuFrameGraph<B, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GpuFrameGraph").field(&self.frames).finish()
    }
}

impl<B: Backend, M: Send + Sync + 'static> GpuFrameGraph<B, M> {
    /// Runs this frame's work `frame` (see [`FrameGraph::run`]).
    pub fn run(
        &mut self,
        frame: impl FnOnce(&ComputeClient<B>) -> crate::Result<()>,
    ) -> crate::Result<FrameMode> {
        self.frames.run(frame)
    }
}

impl<B: Backend, M: Send + Sync + 'static> std::fmt::Debug for GpuworldPlugin<B, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuworldPlugin")
            .field("client", &self.client)
            .field("schedule", &self.schedule)
            .field("config", &self.config)
            .finish()
    }
}

impl<B: Backend> GpuworldPlugin<B> {
    /// A plugin for `client`'s runtime: `PostUpdate`, one tick a frame, at most
    /// [`DEFAULT_FRAMES_IN_FLIGHT`] frames in flight, waiting when full; its resource is
    /// `Gpu<B>`. Give it a `Driver::Manual` client: the frame is then the only thing that ticks.
    pub fn new(client: ComputeClient<B>) -> GpuworldPlugin<B> {
        if client.driver() != Driver::Manual {
            tracing::info!(target: "gpuworld::bevy", "a device thread ticks this runtime too: frames are not tick-exact");
        }
        GpuworldPlugin {
            client: client.with_stream(PLUGIN_STREAM),
            schedule: PostUpdate.intern(),
            config: FrameConfig {
                ticks: TickPolicy::PerFrame(1),
                max_frames_in_flight: DEFAULT_FRAMES_IN_FLIGHT,
                when_full: FramesFull::Wait,
            },
            frame_graph: None,
            marker: PhantomData,
        }
    }
}

impl<B: Backend, M: Send + Sync + 'static> GpuworldPlugin<B, M> {
    /// The same plugin keyed by marker `N`: its resources become `Gpu<B, N>` and
    /// `GpuFrames<B, N>`, so another runtime of the same backend can have its own plugin.
    pub fn with_marker<N: Send + Sync + 'static>(self) -> GpuworldPlugin<B, N> {
        GpuworldPlugin {
            client: self.client,
            schedule: self.schedule,
            config: self.config,
            frame_graph: self.frame_graph,
            marker: PhantomData,
        }
    }

    /// Adds the resource `GpuFrameGraph<B, M>`, whose frames are captured after `identical`
    /// identical ones and replayed while they stay the same.
    pub fn with_frame_graph(mut self, identical: u32) -> Self {
        self.frame_graph = Some(identical);
        self
    }

    /// Runs the plugin's sets in `schedule` (`FixedUpdate` for a fixed timestep).
    pub fn in_schedule(mut self, schedule: impl ScheduleLabel) -> Self {
        self.schedule = schedule.intern();
        self
    }

    /// How many ticks a frame runs.
    pub fn ticks(mut self, ticks: TickPolicy) -> Self {
        self.config.ticks = ticks;
        self
    }

    /// At most `limit` frames in flight (at least 1); `when_full` says what `Submit` does at
    /// the limit.
    pub fn frames_in_flight(mut self, limit: usize, when_full: FramesFull) -> Self {
        self.config.max_frames_in_flight = limit.max(1);
        self.config.when_full = when_full;
        self
    }
}

impl<B: Backend, M: Send + Sync + 'static> Plugin for GpuworldPlugin<B, M> {
    fn build(&self, app: &mut App) {
        let schedule = self.schedule;
        app.insert_resource(Gpu::<B, M>::new(self.client.clone()));
        if let Some(identical) = self.frame_graph {
            app.insert_resource(GpuFrameGraph::<B, M> {
                frames: FrameGraph::new(&self.client, identical),
                marker: PhantomData,
            });
        }
        app.insert_resource(GpuFrames::<B, M> {
            ended: 0,
            skipped: 0,
            waited: 0,
            last_fault: None,
            last_ticks: 0,
            time_in_plugin: Duration::ZERO,
            open: true,
            config: self.config,
            marker: PhantomData,
        });
        app.configure_sets(
            schedule,
            (
                PluginStep::Admit,
                GpuworldSet::Submit.run_if(frame_open::<B, M>),
                PluginStep::IssueReadbacks,
                GpuworldSet::Tick,
                GpuworldSet::Readback,
            )
                .chain(),
        );
        app.add_systems(
            schedule,
            (
                admit_frame::<B, M>.in_set(PluginStep::Admit),
                readback::issue_readbacks::<B, M>
                    .in_set(PluginStep::IssueReadbacks)
                    .run_if(frame_open::<B, M>),
                end_frame_and_tick::<B, M>.in_set(GpuworldSet::Tick),
            ),
        );
        readback::install_delivery(app, schedule);
    }
}

/// Whether runtime `(B, M)` submits this frame.
fn frame_open<B: Backend, M: Send + Sync + 'static>(frames: Res<GpuFrames<B, M>>) -> bool {
    frames.open
}

/// Applies the frames-in-flight limit before `Submit`: waits for the oldest frame, or closes
/// this frame's submissions.
fn admit_frame<B: Backend, M: Send + Sync + 'static>(
    gpu: Res<Gpu<B, M>>,
    mut frames: ResMut<GpuFrames<B, M>>,
) {
    let start = Instant::now();
    let limit = frames.config.max_frames_in_flight;
    // A frame about to be submitted counts: at most `limit - 1` may be in flight before it.
    if gpu.frames_in_flight() < limit {
        frames.open = true;
        frames.time_in_plugin += start.elapsed();
        return;
    }
    match frames.config.when_full {
        FramesFull::Wait => {
            frames.waited += 1;
            if let Err(error) = gpu.wait_for_frames(limit - 1) {
                tracing::warn!(target: "gpuworld::bevy", %error, "a frame the plugin waited for faulted");
                frames.last_fault = Some(error);
            }
            frames.open = true;
        }
        FramesFull::Skip => {
            frames.skipped += 1;
            frames.open = false;
        }
    }
    frames.time_in_plugin += start.elapsed();
}

/// Ends an open frame with its fence and ticks the runtime as the policy says.
fn end_frame_and_tick<B: Backend, M: Send + Sync + 'static>(
    gpu: Res<Gpu<B, M>>,
    mut frames: ResMut<GpuFrames<B, M>>,
) {
    let start = Instant::now();
    if frames.open {
        gpu.end_frame();
        frames.ended += 1;
    }
    frames.last_ticks = match frames.config.ticks {
        TickPolicy::PerFrame(n) => {
            for _ in 0..n {
                gpu.tick();
            }
            n
        }
        TickPolicy::UntilIdle { budget } => tick_until_idle(&gpu, budget),
    };
    frames.time_in_plugin += start.elapsed();
}

/// Ticks until nothing is in flight or `budget` passed (at least once); the ticks run.
fn tick_until_idle<B: Backend>(client: &ComputeClient<B>, budget: Duration) -> u32 {
    let start = Instant::now();
    let mut ticks = 0;
    loop {
        client.tick();
        ticks += 1;
        let left = budget.saturating_sub(start.elapsed());
        if is_idle(client.in_flight()) || left.is_zero() {
            return ticks;
        }
        client
            .with_runtime(|runtime| runtime.wait_for_device(left.min(Duration::from_micros(200))));
    }
}

/// Whether the runtime has nothing left to do (frames are syncs, counted among them).
fn is_idle(in_flight: InFlight) -> bool {
    InFlight {
        frames: 0,
        ..in_flight
    }
    .is_idle()
}

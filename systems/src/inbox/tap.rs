//! A tap on the inbox: a function the ingest stage shows every newly drained command, with the
//! tick that ingests it, before the command is taken apart. Recorders (`gpuworld::testing`) use
//! it to capture the command stream a client sends, on any backend.

use super::Command;
use bevy_ecs::prelude::Resource;

/// The function a [`CommandTap`] holds: the tick, then the command.
pub type TapFn = dyn FnMut(u64, &Command) + Send + Sync;

/// Sees each command as the ingest stage drains it from the inbox, with the tick number; commands
/// retried after waiting for memory are shown once, when first drained.
#[derive(Resource)]
pub struct CommandTap(pub Box<TapFn>);

impl std::fmt::Debug for CommandTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CommandTap").finish_non_exhaustive()
    }
}

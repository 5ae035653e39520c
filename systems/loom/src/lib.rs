//! The inbox's synchronization core, `systems/src/inbox/queue.rs`, compiled from the very same
//! file against loom's primitives (`sync`), so that `tests/loom_inbox.rs` model-checks the code the
//! runtime runs. Only this crate sees loom: gpuworld-systems and its dependencies are built as
//! always, and nothing here needs `--cfg loom`.

pub mod sync;

#[path = "../../src/inbox/queue.rs"]
pub mod queue;

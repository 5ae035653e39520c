//! The synchronization primitives the inbox's core (`inbox/queue.rs`) is written against:
//! parking_lot's, crossbeam's and std's. The model check in `systems/loom` compiles that same
//! file against loom's primitives under these names, so the code it checks is the code that runs
//! here.

pub(crate) use crossbeam_queue::SegQueue;
pub(crate) use parking_lot::{Condvar, Mutex};
pub(crate) use std::sync::atomic::{AtomicBool, Ordering, fence};

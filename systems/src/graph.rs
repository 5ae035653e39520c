//! Captured graphs (issue 28): what a capture records ([`Recorded`], kept by the inbox's
//! [`Recording`], `inbox/capture.rs`), and what a backend replays as one unit
//! ([`gpuworld_hal::graph`]: [`PlannedLaunch`], [`ReplayLaneEnd`]).

pub use crate::inbox::capture::{CaptureOrder, Recorded, Recording, TransferOut};
pub use gpuworld_hal::graph::*;

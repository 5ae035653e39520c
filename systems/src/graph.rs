//! Captured graphs (issue 28): what a capture records ([`Captured`] ops, kept by the inbox's
//! [`Recording`], `inbox/capture.rs`), and what a backend replays as one unit
//! ([`gpuworld_hal::graph`]: [`PlannedLaunch`], [`ReplayLaneEnd`]).

pub use crate::inbox::capture::{CaptureOrder, Captured, CapturedTransfer, Recording, TransferOut};
pub use gpuworld_hal::graph::*;

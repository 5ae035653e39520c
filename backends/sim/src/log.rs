//! The sim's log entries: every backend call and completion, as values ([`SimCall`]); the
//! backend keeps them with their tick and writes them as text (`log_text.rs`).

use gpuworld_hal::backend::{DeviceEvent, DeviceStream, StorageId};
use gpuworld_hal::ids::StreamId;

/// One entry of the sim's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimCall {
    /// A buffer was allocated.
    Allocate {
        /// The new buffer.
        storage: StorageId,
        /// Its size in bytes.
        size: u64,
    },
    /// An allocation was refused.
    AllocateRefused {
        /// The bytes asked for.
        size: u64,
    },
    /// A buffer was freed.
    Deallocate {
        /// The buffer.
        storage: StorageId,
    },
    /// A stream was created.
    CreateStream {
        /// The backend's stream.
        stream: DeviceStream,
        /// The runtime's id of it.
        id: StreamId,
    },
    /// Work was enqueued on a stream.
    Enqueue {
        /// The stream.
        stream: DeviceStream,
        /// The work's number on its queue.
        op: u64,
        /// What the work is, as snapshots show it.
        what: String,
    },
    /// A stream was flushed to an event.
    Flush {
        /// The stream.
        stream: DeviceStream,
        /// The event after its work.
        event: DeviceEvent,
    },
    /// A stream was made to wait on an event.
    Wait {
        /// The stream that waits.
        stream: DeviceStream,
        /// The event it waits for.
        event: DeviceEvent,
    },
    /// Queued work ran.
    Complete {
        /// The stream.
        stream: DeviceStream,
        /// The work's number on its queue.
        op: u64,
    },
    /// Queued work faulted its stream (an injected fault).
    Fault {
        /// The stream.
        stream: DeviceStream,
        /// The work's number on its queue.
        op: u64,
        /// The injected fault's message.
        message: &'static str,
    },
}

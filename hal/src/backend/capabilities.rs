//! What a backend can do beyond the calls every backend answers: plain data the runtime reads to
//! pick a path, instead of calling an optional method to see whether it answers.

/// The optional parts of the backend interface a backend implements
/// ([`Backend::capabilities`](crate::backend::Backend::capabilities)).
///
/// The runtime reads a field before it calls the methods the field names: a method whose field is
/// `false` is never called, and its default answer (an error, `None`) is never seen. The default
/// value is a backend with none of them (the sim's, less its clock). How a device maps pages is
/// in [`DeviceProperties::page_mapping`](super::DeviceProperties::page_mapping), with
/// its page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// [`Queue::graph_replay`](super::Queue::graph_replay) makes a captured graph's
    /// replay of launches on one stream into one native op; without it, each launch of a replay
    /// is a task of its own.
    pub graph_replay: bool,
    /// [`Queue::graph_replay`](super::Queue::graph_replay) also takes replays whose
    /// launches span several streams (lanes with dependencies between them); only read where
    /// `graph_replay` is set.
    pub graph_replay_across_streams: bool,
    /// [`Completion::progress_watch`](super::Completion::progress_watch) gives a watch that
    /// a caller waits on after letting go of the runtime's lock, so other callers tick
    /// meanwhile; without it, a caller waits holding the runtime, through
    /// [`Completion::wait_for_progress`](super::Completion::wait_for_progress).
    pub progress_watch: bool,
    /// [`DeviceTiming::device_clock`](super::DeviceTiming::device_clock) keeps the device time of
    /// completed work (the sim's virtual clock): the autotuner times candidates on it rather
    /// than on marks or host time.
    pub device_clock: bool,
    /// [`CrossDevice::peer_transfer`](super::CrossDevice::peer_transfer) copies between
    /// two runtimes of this backend on the devices; without it, a transfer goes through host
    /// memory.
    pub peer_transfer: bool,
    /// [`CrossDevice::device_collectives`](super::CrossDevice::device_collectives) runs
    /// a client group's collectives on the devices (NCCL); without it, the host combines them.
    pub device_collectives: bool,
    /// [`CrossDevice::process_collectives`](super::CrossDevice::process_collectives)
    /// runs a process group's collectives on the devices; without it, the processes exchange
    /// bytes over their connections.
    pub process_collectives: bool,
}

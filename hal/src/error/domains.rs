//! The error of each domain of gpuworld: each names what went wrong in one layer (bindings,
//! launches, running work, memory, devices, collectives, configuration, autotune, data layout,
//! profiling), and [`Error`](super::Error) composes them.

use crate::ids::{HandleId, RuntimeId, StreamId};
use crate::kernel::Elem;
use crate::kernel::race::RacingAccess;
use crate::usage::{MemoryUsage, ReadableBytes};
use std::sync::Arc;

/// A handle or binding given to a call cannot be used as given; reported at once by the call
/// (or, for a launch or write, by the next read or sync of its stream).
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BindingError {
    /// The handle behind a binding was released (every clone dropped) before this use.
    #[error("handle {handle} was released: every clone was dropped before this use")]
    ReleasedHandle {
        /// The released handle.
        handle: HandleId,
    },
    /// The handle was made by another runtime.
    #[error("handle {handle} belongs to {owner}, not to this runtime ({this})")]
    ForeignHandle {
        /// The handle.
        handle: HandleId,
        /// The runtime that made it.
        owner: RuntimeId,
        /// The runtime it was given to.
        this: RuntimeId,
    },
    /// A binding's offsets leave no valid range inside its handle.
    #[error("binding of {handle} covers bytes {start}..{end}, outside the handle's {size} bytes")]
    OutOfRange {
        /// The handle.
        handle: HandleId,
        /// First byte of the requested range.
        start: u64,
        /// One past the last byte of the requested range.
        end: u64,
        /// The handle's size in bytes.
        size: u64,
    },
    /// A write holds more bytes than its destination.
    #[error("write of {len} bytes does not fit in {handle}, which has {capacity} bytes")]
    WriteTooLarge {
        /// The destination handle.
        handle: HandleId,
        /// Bytes given.
        len: u64,
        /// Bytes available in the destination binding.
        capacity: u64,
    },
}

/// A launch does not fit its kernel's signature, or the backend has no source for the kernel;
/// reported at once by the launch.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LaunchError {
    /// A kernel was given the wrong number of buffers or scalars.
    #[error(
        "kernel `{kernel}` takes {expected} {what}{}, got {got}",
        if *.expected == 1 { "" } else { "s" }
    )]
    BindingCount {
        /// The kernel's name.
        kernel: &'static str,
        /// "buffer binding" or "scalar".
        what: &'static str,
        /// What the kernel declares.
        expected: usize,
        /// What the launch gave.
        got: usize,
    },
    /// A launch gave a scalar of another type than the kernel declares for it.
    #[error(
        "kernel `{kernel}` declares scalar `{param}` as {declared}, but the launch gave a {got} \
         (use Bindings::scalar_{declared})"
    )]
    ScalarType {
        /// The kernel's name.
        kernel: &'static str,
        /// The scalar's name in the signature.
        param: &'static str,
        /// The type the signature declares.
        declared: Elem,
        /// The type the launch gave.
        got: Elem,
    },
    /// A buffer bound to a kernel is not a whole number of the declared elements.
    #[error(
        "kernel `{kernel}` declares buffer `{param}` as array<{elem}>, but the binding holds \
         {bytes} bytes, not a multiple of {elem}'s {} bytes",
        .elem.size()
    )]
    BufferElementSize {
        /// The kernel's name.
        kernel: &'static str,
        /// The buffer's name in the signature.
        param: &'static str,
        /// The element type the signature declares.
        elem: Elem,
        /// The binding's size in bytes.
        bytes: u64,
    },
    /// A binding handed to a kernel does not start on a 4-byte boundary.
    #[error(
        "kernel `{kernel}` binding {index} starts at byte {offset}, which is not a multiple of 4"
    )]
    MisalignedBinding {
        /// The kernel's name.
        kernel: &'static str,
        /// Position of the binding in the launch.
        index: usize,
        /// The binding's byte offset.
        offset: u64,
    },
    /// The backend has no source for the kernel.
    #[error("kernel `{kernel}` has no source for the {backend} backend")]
    MissingKernelSource {
        /// The kernel's name.
        kernel: &'static str,
        /// The backend's name.
        backend: &'static str,
    },
    /// A launch's cube count is over the device's limit along an axis: refused by the launch, or
    /// for a dynamic count (read when the launch runs) the stream's fault on the cpu and sim
    /// backends.
    #[error(
        "kernel `{kernel}` is launched over {count:?} cubes{}: {} along {axis}, over the \
         device's limit of {limit} per axis (DeviceProperties::max_cube_count); split the launch \
         or spread its cubes over more axes",
        if *.dynamic { " (its dynamic count, read as it ran; it ran no cube)" } else { "" },
        .count[match *.axis { "x" => 0, "y" => 1, _ => 2 }]
    )]
    CubeCountOverLimit {
        /// The kernel's name.
        kernel: &'static str,
        /// The cube count of the launch.
        count: [u32; 3],
        /// The axis over the limit: "x", "y" or "z".
        axis: &'static str,
        /// The device's limit per axis along it.
        limit: u32,
        /// Whether the count was read from a buffer as the launch ran.
        dynamic: bool,
    },
    /// A kernel's cube dim is over the device's limit on units along an axis or per cube.
    #[error(
        "kernel `{kernel}` declares a cube dim of {cube_dim:?}: {value} {}{what}, over the \
         device's limit of {limit} (DeviceProperties::max_cube_dim and max_units_per_cube)",
        if .what.len() == 1 { "units along " } else { "" }
    )]
    CubeDimOverLimit {
        /// The kernel's name.
        kernel: &'static str,
        /// The kernel's cube dim.
        cube_dim: [u32; 3],
        /// What is over: an axis ("x", "y", "z") or "units per cube".
        what: &'static str,
        /// Its value.
        value: u64,
        /// The device's limit on it.
        limit: u64,
    },
}

/// Work failed while its stream ran it: the stream's fault, reported by the next read or sync
/// of that stream.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExecutionError {
    /// A kernel panicked while running on the CPU.
    #[error("kernel `{kernel}` panicked on {stream}: {message}")]
    KernelPanic {
        /// The kernel's name.
        kernel: &'static str,
        /// The stream it ran on.
        stream: StreamId,
        /// The panic message.
        message: Arc<str>,
    },
    /// A CPU kernel stored to a buffer its signature declares read-only; the launch stopped there.
    #[error(
        "kernel `{kernel}` stored to buffer `{param}` on {stream}, which its signature declares \
         read-only (Param::read_only); the launch stopped at that store"
    )]
    ReadOnlyStore {
        /// The kernel's name.
        kernel: &'static str,
        /// The buffer's name in the signature.
        param: &'static str,
        /// The stream it ran on.
        stream: StreamId,
    },
    /// Two units of one checked launch raced on an element of a device buffer (cpu and sim
    /// backends, `gpuworld::kernel::race`): both stored to it, one stored to what the other
    /// loaded, or one accessed plainly what the other changed atomically. The launch ran on;
    /// what it left in the buffer is one of the orders the device may pick.
    #[error(
        "kernel `{kernel}` raced on {stream}: element {element} of buffer `{param}` — {first}, \
         and {second}, in one launch, so the result depends on the order units run in (it \
         differs between devices); let one unit own each element, or declare the buffer \
         `.atomic()` and change it with atomics"
    )]
    DataRace {
        /// The kernel's name.
        kernel: &'static str,
        /// The buffer's name in the signature.
        param: &'static str,
        /// The element's index.
        element: u64,
        /// The access recorded first.
        first: RacingAccess,
        /// The access that conflicts with it.
        second: RacingAccess,
        /// The stream it ran on.
        stream: StreamId,
    },
    /// The device reported a fault while running work on a stream.
    #[error("device fault on {stream}: {message}")]
    DeviceFault {
        /// The stream the work ran on.
        stream: StreamId,
        /// What the device said.
        message: Arc<str>,
    },
    /// A kernel's source did not compile for the device.
    #[error("kernel `{kernel}` failed to compile:\n{log}")]
    Compile {
        /// The kernel's name.
        kernel: &'static str,
        /// The compiler's log.
        log: Arc<str>,
    },
}

/// Device memory could not be provided for a handle; reported by every use of that handle.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MemoryError {
    /// The device could not provide the requested memory, even after a cleanup.
    #[error("{}", describe_out_of_memory(*requested, usage, *capacity))]
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// Usage when the request failed.
        usage: MemoryUsage,
        /// The memory the runtime may use on the device (`DeviceProperties::memory_bytes`),
        /// when the device reports it.
        capacity: Option<u64>,
    },
    /// One allocation larger than the device's largest buffer: no cleanup can make room for it.
    #[error(
        "buffer too large: {} requested, but the device's largest buffer is {} (a limit of the \
         device, not out of memory); split the data into buffers of at most {1}, or use a \
         backend without this limit (cuda has none)",
        ReadableBytes(*requested),
        ReadableBytes(*limit)
    )]
    BufferTooLarge {
        /// Bytes requested.
        requested: u64,
        /// The device's largest buffer, in bytes (`DeviceProperties::max_buffer_bytes`).
        limit: u64,
    },
    /// The device failed earlier (a sticky fault, a lost device), so it gives no memory at all.
    #[error(
        "{} requested from a device that failed earlier, which gives no memory: {reason}",
        ReadableBytes(*requested)
    )]
    DeviceFailed {
        /// Bytes requested.
        requested: u64,
        /// The device's failure.
        reason: Arc<str>,
    },
    /// A key into the memory pools no longer names a live page or slice.
    #[error("stale memory key: {what} no longer exists")]
    StaleHandle {
        /// What the key referred to.
        what: Arc<str>,
    },
}

/// A backend or device cannot be opened; returned by the constructor.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The backend cannot be used on this machine.
    #[error("the {backend} backend is unavailable: {reason}")]
    BackendUnavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why it cannot be used.
        reason: Arc<str>,
    },
    /// No device of that name can be opened by this binary.
    #[error("no device {device}: {reason}")]
    NoSuchDevice {
        /// The device asked for (`backend:index`).
        device: Arc<str>,
        /// Why it cannot be opened.
        reason: Arc<str>,
    },
}

/// A group of devices, or the buffers of a collective or transfer between them, do not fit
/// together (returned at once, with nothing queued); or a rank of a process group failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CollectiveError {
    /// A group of clients lists one device more than once.
    #[error("device {device} is listed more than once in the group")]
    DeviceListedTwice {
        /// The device (`backend:index`).
        device: Arc<str>,
    },
    /// The buffers of a collective or transfer do not fit together.
    #[error("collective `{op}` refused: {reason}")]
    MismatchedBuffers {
        /// The collective (`all_reduce`, `broadcast`, `to_client`, ...).
        op: &'static str,
        /// What does not fit: counts, sizes or element types.
        reason: Arc<str>,
    },
    /// A rank of a process group (`gpuworld::distributed`) failed during a collective or a
    /// transfer: it closed its connection, went silent past the timeout, or reported an error.
    #[error("rank {rank} of the process group failed: {reason}")]
    PeerFailed {
        /// The rank that failed.
        rank: usize,
        /// How it failed, as this process saw it.
        reason: Arc<str>,
    },
    /// The ranks of a process group could not meet: a rank never arrived before the timeout,
    /// came twice, or disagrees on the world size.
    #[error("rendezvous failed: {reason}")]
    RendezvousFailed {
        /// What went wrong, naming the ranks and the address.
        reason: Arc<str>,
    },
}

/// A setting of a configuration file, a `GPUWORLD_*` variable or a backend's config is refused.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A configuration file or `GPUWORLD_*` variable holds an unknown key or a bad value.
    #[error("{origin}: {problem}")]
    InvalidSetting {
        /// Where the setting came from: the file's path or the environment variable.
        origin: Arc<str>,
        /// What is wrong and what is allowed, naming the key.
        problem: Arc<str>,
    },
}

/// Autotune found no candidate to use; nothing was cached.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AutotuneError {
    /// Every candidate of a tunable set failed for a key.
    #[error(
        "autotune of `{set}` for key {key} failed: {}",
        describe_failures(reasons)
    )]
    AllCandidatesFailed {
        /// The tunable set's name.
        set: Arc<str>,
        /// The key that was being tuned.
        key: Arc<str>,
        /// Why each candidate failed, in the set's order.
        reasons: Vec<CandidateFailure>,
    },
}

/// Bytes do not have the layout a typed read or a tensor call asks for; returned at once.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LayoutError {
    /// A typed read got a byte count that is not a whole number of elements.
    #[error("read of {len} bytes is not a whole number of {elem_size}-byte elements")]
    ElementSize {
        /// Bytes read.
        len: u64,
        /// Size of one element.
        elem_size: u64,
    },
    /// A tensor's shape, strides, element size or data do not describe a valid tensor.
    #[error("invalid tensor: {reason}")]
    InvalidTensor {
        /// What is wrong, with the shape, strides and element size.
        reason: Arc<str>,
    },
}

/// Profiling or tracing was asked for what it cannot give.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProfileError {
    /// `profile` was asked to time work on a backend that keeps no device time for it.
    #[error("cannot profile `{name}` on the {backend} backend: {reason}")]
    TimingUnavailable {
        /// The name given to `profile`.
        name: Arc<str>,
        /// The backend's name.
        backend: &'static str,
        /// Why its work cannot be timed.
        reason: &'static str,
    },
    /// `stop_trace` was called while no trace was being recorded.
    #[error("no trace is being recorded: call start_trace first")]
    TraceNotStarted,
}

/// The text of [`MemoryError::OutOfMemory`]: the request, the usage and the capacity in readable
/// units, then what can make room.
fn describe_out_of_memory(requested: u64, usage: &MemoryUsage, capacity: Option<u64>) -> String {
    let mut text = format!(
        "out of memory: {} requested with {} in use, {} reserved and {} of it cached (free in \
         pools)",
        ReadableBytes(requested),
        ReadableBytes(usage.bytes_in_use),
        ReadableBytes(usage.bytes_reserved),
        ReadableBytes(usage.bytes_cached()),
    );
    if let Some(capacity) = capacity {
        text += &format!(", of {} device memory", ReadableBytes(capacity));
    }
    text += "; to make room: drop unneeded handles, call `memory_cleanup` on the device's other \
             clients, use smaller pool pages if much is cached (`page_size`, `max_slice` in \
             `MemoryConfig::pools`) or a larger `max_reserved` on a capped pool";
    if capacity.is_some() {
        text += ", or raise the memory limit if one was set (cpu `memory_limit`, wgpu \
                 `memory_capacity`)";
    }
    text
}

/// The reasons of [`AutotuneError::AllCandidatesFailed`] as one line.
fn describe_failures(reasons: &[CandidateFailure]) -> String {
    if reasons.is_empty() {
        return "the set has no candidate".to_string();
    }
    let each: Vec<String> = reasons
        .iter()
        .map(|r| format!("`{}`: {}", r.candidate, r.reason))
        .collect();
    format!("every candidate failed ({})", each.join("; "))
}

/// Why one autotune candidate could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateFailure {
    /// The candidate's name.
    pub candidate: Arc<str>,
    /// What went wrong: the error, the panic message or the output mismatch.
    pub reason: Arc<str>,
}

/// A capture or a captured graph (`ComputeClient::capture`, `Graph`) refused a call.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum GraphError {
    /// A call that a replay cannot issue again was made inside a capture: the capture fails.
    #[error(
        "`{call}` cannot be captured: a graph replays launches, writes and flushes; read, sync \
         or run collectives before the capture or after a replay"
    )]
    NotCapturable {
        /// The call (`read`, `sync`, `mark`, the native work's name, ...).
        call: &'static str,
    },
    /// A capture was opened on a client whose runtime is capturing already.
    #[error("a capture is already open on this runtime: end it before starting another")]
    NestedCapture,
    /// A graph update named a command the graph does not have, or one of another kind.
    #[error("graph command {node} is not {wanted}: the graph has {nodes} commands ({found})")]
    NoSuchNode {
        /// The command's index.
        node: usize,
        /// What the update needs there (`a launch`, `a write`).
        wanted: &'static str,
        /// How many commands the graph has.
        nodes: usize,
        /// What is there, or `none`.
        found: &'static str,
    },
    /// A graph update does not fit the captured command.
    #[error("graph command {node}: {reason}")]
    UpdateRefused {
        /// The command's index.
        node: usize,
        /// What does not fit.
        reason: Arc<str>,
    },
    /// A graph was replayed after every client of a runtime it replays on was dropped: nothing
    /// could ever read what the replay writes.
    #[error(
        "no client of {runtime} is left: a replay there could never be read; keep a client \
         of every runtime the graph replays on, or drop the graph"
    )]
    NoClientLeft {
        /// The runtime without a client.
        runtime: RuntimeId,
    },
}

/// A checkpoint file cannot be written or restored, or a rollback ring cannot do what was
/// asked; returned by the call, with nothing restored (`gpuworld::checkpoint`).
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file system refused a read, write, sync or rename.
    #[error("checkpoint {path}: cannot {operation}: {reason}")]
    Io {
        /// The file or directory.
        path: Arc<str>,
        /// What was being done (`create the temporary file`, `read`, ...).
        operation: &'static str,
        /// What the operating system said.
        reason: Arc<str>,
    },
    /// The file does not start with the checkpoint magic: it is not a checkpoint.
    #[error("{path} is not a gpuworld checkpoint: it starts with {found:02x?}, not `GPUWCKPT`")]
    NotACheckpoint {
        /// The file.
        path: Arc<str>,
        /// Its first bytes (up to 8).
        found: Vec<u8>,
    },
    /// The file is a checkpoint of a format version this build does not read.
    #[error("checkpoint {path} has format version {version}; this build reads version {supported}")]
    UnsupportedVersion {
        /// The file.
        path: Arc<str>,
        /// The version the file declares.
        version: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// The file ends before its last byte: a copy or write cut short.
    #[error(
        "checkpoint {path} is truncated: it ends at byte {len}, inside {section}, which runs to byte {needed}"
    )]
    Truncated {
        /// The file.
        path: Arc<str>,
        /// The file's length in bytes.
        len: u64,
        /// The part of the file it ends in (`the header`, `buffer 2 ("vel")`, ...).
        section: Arc<str>,
        /// The byte that part runs to: the file needs at least this many bytes.
        needed: u64,
    },
    /// A part of the file does not match its checksum, or is not what its header says.
    #[error("checkpoint {path} is corrupted: {section} {problem}")]
    Corrupted {
        /// The file.
        path: Arc<str>,
        /// The part that is wrong (`the header`, `the metadata`, `buffer 0 ("pos")`, ...).
        section: Arc<str>,
        /// What is wrong with it (a checksum mismatch with both values, a bad field).
        problem: Arc<str>,
    },
    /// The checkpoint's buffers do not fit the device it is restored on; nothing was allocated.
    #[error(
        "checkpoint {path} does not fit the device: {what}: {} needed, but {limit_name} is {}",
        ReadableBytes(*needed),
        ReadableBytes(*limit)
    )]
    TooLargeForDevice {
        /// The file.
        path: Arc<str>,
        /// What does not fit (`buffer 1 ("field")`, `its 3 buffers together`).
        what: Arc<str>,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the device gives it.
        limit: u64,
        /// Which limit that is (`the device's largest buffer`, `the device memory free`).
        limit_name: &'static str,
    },
    /// Two buffers of one checkpoint have the same name.
    #[error("checkpoint buffer name `{name}` is given twice: names must be unique")]
    DuplicateName {
        /// The name.
        name: Arc<str>,
    },
    /// A rollback ring cannot copy a buffer on the device: it is not whole 4-byte words.
    #[error(
        "rollback ring buffer {index} covers {size} bytes from byte {offset}: a device copy needs whole 4-byte words from a 4-byte offset"
    )]
    NotWholeWords {
        /// The buffer's position in the ring.
        index: usize,
        /// Its size in bytes.
        size: u64,
        /// Its offset in its handle.
        offset: u64,
    },
    /// A rollback asked for a frame the ring does not hold (never saved, overwritten, or after
    /// a frame rolled back to).
    #[error("frame {frame} is not held by the rollback ring (it holds {held})")]
    FrameNotHeld {
        /// The frame asked for.
        frame: u64,
        /// The frames the ring holds, as text (`12..=19`, `none`).
        held: Arc<str>,
    },
}

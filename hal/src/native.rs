//! Native work: what a backend runs itself on a stream, ordered by the runtime like a launch.
//! Re-exported by `backend`, beside the trait that runs it; a module of its own so that
//! `cross_device`, whose transfers and collectives are native work, and `backend`, whose hooks
//! return them, do not import each other.

use crate::error::Error;

/// Work a backend runs itself on a stream, over the task's bindings, that the runtime orders
/// like a launch but cannot express as one (a collective through NCCL). The backend that
/// accepts it downcasts it to its own type ([`NativeOp::as_any`]).
pub trait NativeOp: std::any::Any + Send + Sync {
    /// A short name for logs and snapshots.
    fn name(&self) -> &'static str;
    /// The op as `Any`, for the backend to downcast.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Whether the op can be taken yet: while `Pending`, ingest holds it and every command after
    /// it, as it holds a write of arriving bytes (an op waiting for another runtime's part),
    /// until `cx`'s waker asks for another tick; an error becomes the stream's fault. Ready by
    /// default.
    fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Error>> {
        let _ = cx;
        std::task::Poll::Ready(Ok(()))
    }
    /// Told that the op will not run because of `error` (a binding that does not resolve, or
    /// its own [`NativeOp::poll_ready`] error): an op that another runtime waits for gives it
    /// the error and returns `true`, and the other runtime reports it (a transfer's failure is
    /// its destination's fault); otherwise (`false`, the default) it becomes the stream's fault.
    fn pass_on(&self, error: &Error) -> bool {
        let _ = error;
        false
    }
}

impl std::fmt::Debug for dyn NativeOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NativeOp").field(&self.name()).finish()
    }
}

/// A boxed [`NativeOp`], as tasks carry it.
pub type NativeWork = Box<dyn NativeOp>;

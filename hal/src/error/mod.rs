//! The error of gpuworld: every fallible client call returns an [`Error`], which holds the error
//! of one domain (`domains.rs`) and tells its [`ErrorKind`] without a match through the layers.

mod domains;

pub use domains::{
    AutotuneError, BindingError, CandidateFailure, CheckpointError, CollectiveError, ConfigError,
    DeviceError, ExecutionError, GraphError, LaunchError, LayoutError, MemoryError, ProfileError,
};

use crate::ids::StreamId;
use std::sync::Arc;

/// What went wrong, with enough detail for the caller to fix it: the error of one domain, whose
/// message it shows as is. [`Error::kind`] answers which error it is in one call; match a
/// domain's variant for its details.
///
/// ```
/// use gpuworld_hal::error::{Error, ErrorKind, MemoryError};
/// use gpuworld_hal::usage::MemoryUsage;
///
/// let error = Error::from(MemoryError::OutOfMemory {
///     requested: 1 << 20,
///     usage: MemoryUsage::default(),
///     capacity: None,
/// });
/// assert!(error.is_out_of_memory());
/// assert_eq!(error.kind(), ErrorKind::OutOfMemory);
/// assert!(matches!(error, Error::Memory(MemoryError::OutOfMemory { requested: 1048576, .. })));
/// ```
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A handle or binding cannot be used as given.
    #[error(transparent)]
    Binding(#[from] BindingError),
    /// A launch does not fit its kernel or the backend.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Work failed while its stream ran it.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    /// Device memory could not be provided.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A backend or device cannot be opened.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Devices or buffers of a collective or transfer do not fit together.
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// A configuration setting is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Autotune found no candidate to use.
    #[error(transparent)]
    Autotune(#[from] AutotuneError),
    /// Bytes do not have the layout asked for.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A capture or a captured graph refused a call.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// Profiling or tracing cannot give what was asked.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A checkpoint cannot be written or restored, or a rollback cannot be done.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The runtime was shut down before the request completed.
    #[error("the runtime shut down before the request completed")]
    Disconnected,
}

/// Declares [`ErrorKind`], one kind per variant of each domain, and [`Error::kind`], whose match
/// names every variant of every domain: a new variant does not compile until it has a kind, and
/// then `ErrorKind::ALL` holds it (`tests/errors.rs` checks at compile time that the catalogue
/// has it).
macro_rules! error_kinds {
    ($($top:ident($domain:ident) { $($kind:ident),+ $(,)? })+) => {
        /// Which error an [`Error`] is, one kind per variant of the domain errors: a stable,
        /// shallow answer (`error.kind() == ErrorKind::OutOfMemory`) for logs, metrics and
        /// retries.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $($(
                #[doc = concat!("[`", stringify!($domain), "::", stringify!($kind), "`].")]
                $kind,
            )+)+
            /// [`Error::Disconnected`].
            Disconnected,
        }

        impl ErrorKind {
            /// Every kind, in the order of the domains and their variants.
            pub const ALL: &'static [ErrorKind] =
                &[$($(ErrorKind::$kind,)+)+ ErrorKind::Disconnected];

            /// The kind's name, as written in code (`"OutOfMemory"`).
            pub const fn name(self) -> &'static str {
                match self {
                    $($(ErrorKind::$kind => stringify!($kind),)+)+
                    ErrorKind::Disconnected => "Disconnected",
                }
            }

            /// The pattern of the kind's variant, as a match on an [`Error`] writes it
            /// (`"Error::Memory(MemoryError::OutOfMemory)"`).
            pub const fn path(self) -> &'static str {
                match self {
                    $($(ErrorKind::$kind => concat!(
                        "Error::", stringify!($top), "(", stringify!($domain), "::",
                        stringify!($kind), ")"
                    ),)+)+
                    ErrorKind::Disconnected => "Error::Disconnected",
                }
            }
        }

        impl Error {
            /// Which error this is, whatever its domain.
            pub fn kind(&self) -> ErrorKind {
                match self {
                    $($(Error::$top($domain::$kind { .. }) => ErrorKind::$kind,)+)+
                    Error::Disconnected => ErrorKind::Disconnected,
                }
            }
        }
    };
}

error_kinds! {
    Binding(BindingError) { ReleasedHandle, ForeignHandle, OutOfRange, WriteTooLarge }
    Launch(LaunchError) {
        BindingCount, ScalarType, BufferElementSize, MisalignedBinding, MissingKernelSource,
        CubeCountOverLimit, CubeDimOverLimit,
    }
    Execution(ExecutionError) { KernelPanic, ReadOnlyStore, DataRace, DeviceFault, Compile }
    Memory(MemoryError) { OutOfMemory, BufferTooLarge, DeviceFailed, StaleHandle }
    Device(DeviceError) { BackendUnavailable, NoSuchDevice }
    Collective(CollectiveError) {
        DeviceListedTwice, MismatchedBuffers, PeerFailed, RendezvousFailed,
    }
    Config(ConfigError) { InvalidSetting }
    Autotune(AutotuneError) { AllCandidatesFailed }
    Layout(LayoutError) { ElementSize, InvalidTensor }
    Profile(ProfileError) { TimingUnavailable, TraceNotStarted }
    Graph(GraphError) { NotCapturable, NestedCapture, NoSuchNode, UpdateRefused, NoClientLeft }
    Checkpoint(CheckpointError) {
        Io, NotACheckpoint, UnsupportedVersion, Truncated, Corrupted, TooLargeForDevice,
        DuplicateName, NotWholeWords, FrameNotHeld,
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// A device fault on `stream` with `message`.
    pub fn device_fault(stream: StreamId, message: impl Into<Arc<str>>) -> Error {
        Error::Execution(ExecutionError::DeviceFault {
            stream,
            message: message.into(),
        })
    }

    /// Whether the device could not provide the memory asked for, even after a cleanup
    /// ([`MemoryError::OutOfMemory`]): dropping handles or a cleanup elsewhere may make room.
    pub fn is_out_of_memory(&self) -> bool {
        self.kind() == ErrorKind::OutOfMemory
    }

    /// Whether the runtime shut down before answering ([`Error::Disconnected`]).
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Error::Disconnected)
    }

    /// Whether the backend or device cannot be opened on this machine ([`DeviceError`]): no
    /// driver, adapter or device of that name.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Device(_))
    }

    /// Whether the error is its stream's fault ([`ExecutionError`]): work failed while the
    /// stream ran it, and the next read or sync of that stream reported it.
    pub fn is_execution_fault(&self) -> bool {
        matches!(self, Error::Execution(_))
    }
}

/// Shorthand for results of gpuworld calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_its_path_names_it() {
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            assert!(
                !ErrorKind::ALL[..i].contains(kind),
                "{kind} is listed twice"
            );
            assert!(kind.path().contains(kind.name()), "{}", kind.path());
        }
    }

    #[test]
    fn an_error_shows_its_domain_error_message_and_tells_its_kind() {
        let domain = BindingError::WriteTooLarge {
            handle: crate::ids::HandleId(3),
            len: 8,
            capacity: 4,
        };
        let error = Error::from(domain.clone());
        assert_eq!(error.to_string(), domain.to_string());
        assert_eq!(error.kind(), ErrorKind::WriteTooLarge);
        assert_eq!(
            error.kind().path(),
            "Error::Binding(BindingError::WriteTooLarge)"
        );
        assert!(!error.is_out_of_memory() && !error.is_disconnected() && !error.is_unavailable());
        assert!(Error::device_fault(StreamId { value: 1 }, "lost").is_execution_fault());
        assert!(Error::Disconnected.is_disconnected());
    }
}

//! Bad input gets a typed error with a clear message, and the runtime stays usable with every
//! byte already written intact. `MISUSES` is the catalogue: each case performs one misuse of the
//! public API on a real client, asserts its error, then proves the runtime still works; the
//! catalogue test renders `docs/errors.md` from the cases, with each error's actual message, and
//! fails when the file differs (`GPUWORLD_UPDATE_DOCS=1` rewrites it). The tests after it pin
//! down how some errors are reported.

mod common;

use common::{Skip, bytes_of, f32s};
use gpuworld::checkpoint::{Checkpoint, CheckpointMeta};
use gpuworld::error::{
    AutotuneError, BindingError, CheckpointError, CollectiveError, DeviceError, ExecutionError,
    GraphError, LaunchError, LayoutError, MemoryError, ProfileError,
};
use gpuworld::kernel::{CpuSource, CubeContext, KernelIo, KernelSource, Param, Signature};
use gpuworld::tune::{CacheLocation, TunableSet, TuneKey, Tuner, TunerConfig};
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Error, ErrorKind, KernelDef,
    StreamId, library,
};
use std::sync::Arc;

test_main![
    every_misuse_gets_its_error_leaves_the_runtime_usable_and_is_in_docs_errors_md,
    a_kernel_that_panics_is_reported_by_sync_too,
    a_zero_cube_count_is_a_no_op,
    a_failed_allocation_is_reported_by_every_use_of_its_handle_and_by_nothing_else,
];

fn cpu() -> ComputeClient<CpuBackend> {
    gpuworld::cpu_client(Driver::Manual).unwrap()
}

/// Proves the client still creates, launches and reads, and that `kept` still holds `expected`.
fn still_works<B: Backend>(client: &ComputeClient<B>, kept: &gpuworld::Handle, expected: &[f32]) {
    assert_eq!(f32s(&client.read_one(kept).unwrap()), expected);
    let input = client.create(bytes_of(&[1.0, 2.0]));
    let output = client.empty(8);
    client
        .launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&input)
                .buffer(&output)
                .scalar_f32(2.0),
        )
        .unwrap();
    assert_eq!(f32s(&client.read_one(&output).unwrap()), vec![2.0, 4.0]);
    client.sync().unwrap();
}

/// One misuse of the public API, as `docs/errors.md` lists it.
struct Misuse {
    /// The kind of error the misuse gets.
    kind: ErrorKind,
    /// What the user does wrong: the catalogue's heading.
    what: &'static str,
    /// Which call reports it, and when.
    reported: &'static str,
    /// The case's function, which names it in the catalogue.
    case: &'static str,
    /// Performs the misuse on a fresh runtime, asserts the error and that the runtime still
    /// works afterwards, and returns the error; `None` when its backend is missing here.
    run: fn() -> Option<Error>,
}

/// A [`Misuse`] whose `case` is the name of its function.
macro_rules! misuse {
    ($kind:expr, $what:expr, $reported:expr, $run:ident) => {
        Misuse {
            kind: $kind,
            what: $what,
            reported: $reported,
            case: stringify!($run),
            run: $run,
        }
    };
}

/// Every misuse the public API can suffer, in the catalogue's order.
const MISUSES: &[Misuse] = &[
    misuse!(
        ErrorKind::ReleasedHandle,
        "Reading a handle after every clone of it was dropped",
        "by the read",
        reading_a_released_handle_is_an_error
    ),
    misuse!(
        ErrorKind::ReleasedHandle,
        "Launching on a handle after every clone of it was dropped",
        "by the next read or sync of the stream",
        launching_with_a_released_handle_reports_on_the_next_sync
    ),
    misuse!(
        ErrorKind::ReleasedHandle,
        "Leasing a handle to a renderer after every clone of it was dropped (`lease`)",
        "at once, by the lease; nothing stays pinned",
        leasing_a_released_handle_is_an_error
    ),
    misuse!(
        ErrorKind::ForeignHandle,
        "Using a handle of another runtime (read, write or launch)",
        "at once, by the call",
        a_handle_from_another_runtime_is_rejected
    ),
    misuse!(
        ErrorKind::OutOfRange,
        "A binding whose offsets run past its handle's end (read, write or launch)",
        "at once, by the call",
        offsets_past_the_end_are_rejected
    ),
    misuse!(
        ErrorKind::WriteTooLarge,
        "Writing more bytes than the destination holds",
        "at once, by the write; nothing is written",
        a_write_larger_than_the_handle_is_rejected_and_writes_nothing
    ),
    misuse!(
        ErrorKind::BindingCount,
        "Launching with the wrong number of buffers or scalars",
        "at once, by the launch",
        a_kernel_given_the_wrong_number_of_bindings_is_rejected
    ),
    misuse!(
        ErrorKind::ScalarType,
        "Launching with a scalar of another type than the kernel declares",
        "at once, by the launch",
        a_scalar_of_the_wrong_type_is_rejected
    ),
    misuse!(
        ErrorKind::BufferElementSize,
        "Binding a buffer that is not a whole number of the declared elements",
        "at once, by the launch",
        a_buffer_that_is_not_whole_elements_is_rejected
    ),
    misuse!(
        ErrorKind::MisalignedBinding,
        "Binding a buffer at an offset that is not a multiple of 4",
        "at once, by the launch",
        a_binding_not_aligned_to_four_bytes_is_rejected
    ),
    misuse!(
        ErrorKind::OutOfRange,
        "A dynamic cube count in a binding shorter than 12 bytes",
        "at once, by the launch",
        a_dynamic_count_shorter_than_three_words_is_rejected
    ),
    misuse!(
        ErrorKind::MissingKernelSource,
        "Launching a kernel that has no source for the backend",
        "at once, by the launch",
        a_kernel_without_a_source_for_the_backend_is_rejected
    ),
    misuse!(
        ErrorKind::CubeCountOverLimit,
        "Launching more cubes along an axis than the device runs (`DeviceProperties::max_cube_count`)",
        "at once, by the launch (a dynamic count over it: by the next read or sync of the \
         stream on cpu and sim, which run no cube of it)",
        a_cube_count_over_the_devices_limit_is_rejected
    ),
    misuse!(
        ErrorKind::CubeDimOverLimit,
        "Launching a kernel whose cube dim is over the device's limits (`max_cube_dim`, \
         `max_units_per_cube`)",
        "at once, by the launch",
        a_cube_dim_over_the_devices_limit_is_rejected
    ),
    misuse!(
        ErrorKind::KernelPanic,
        "A kernel that panics (cpu backend)",
        "by the next read or sync of the stream, once",
        a_kernel_that_panics_is_an_error_on_its_stream_reported_on_the_next_read
    ),
    misuse!(
        ErrorKind::ReadOnlyStore,
        "A kernel that stores to a buffer its signature declares read-only (cpu backend)",
        "by the next read or sync of the stream, once; the launch stops at that store",
        a_store_to_a_read_only_buffer_is_an_error_on_its_stream
    ),
    misuse!(
        ErrorKind::DataRace,
        "Two units of one checked launch storing to one element, or one storing to what \
         another loads (cpu and sim backends)",
        "by the next read or sync of the stream, once; the launch runs to its end",
        two_units_storing_one_element_is_a_race_on_its_stream
    ),
    misuse!(
        ErrorKind::KernelPanic,
        "An unchecked launch that stores out of bounds (cpu backend)",
        "by the next read or sync of the stream; nothing outside the binding is written",
        an_out_of_bounds_store_in_an_unchecked_launch_is_a_kernel_panic_on_the_host
    ),
    misuse!(
        ErrorKind::Compile,
        "A kernel whose source does not compile for the device (wgpu, cuda)",
        "by the next read or sync of the stream, at every launch of it",
        a_kernel_that_does_not_compile_is_an_error_on_its_stream
    ),
    misuse!(
        ErrorKind::OutOfMemory,
        "Allocating more than the device has",
        "by every use of that handle, and by nothing else",
        running_out_of_memory_is_an_error_and_keeps_what_exists
    ),
    misuse!(
        ErrorKind::BufferTooLarge,
        "Allocating one buffer larger than the device's largest (wgpu's `max_buffer_size`, \
         `isize::MAX` bytes on the cpu)",
        "by every use of that handle, and by nothing else; nothing is cleaned up",
        a_buffer_larger_than_the_device_allows_is_not_out_of_memory
    ),
    misuse!(
        ErrorKind::ElementSize,
        "Reading as a type whose size does not divide the bytes read",
        "by the typed read",
        reading_as_a_type_that_does_not_divide_the_bytes_is_an_error
    ),
    misuse!(
        ErrorKind::InvalidTensor,
        "Tensor data or strides that do not match the shape",
        "at once, by the tensor call",
        tensor_data_that_does_not_match_its_shape_is_rejected
    ),
    misuse!(
        ErrorKind::AllCandidatesFailed,
        "Autotuning a set whose every candidate fails",
        "by the tuner's `execute` or `select`; nothing is cached",
        autotuning_a_set_whose_every_candidate_fails_is_an_error
    ),
    misuse!(
        ErrorKind::NoSuchDevice,
        "Asking a backend for a client of a device of another backend",
        "at once, by `ComputeClient::open_device`",
        a_client_of_a_device_not_built_in_is_refused
    ),
    misuse!(
        ErrorKind::DeviceListedTwice,
        "A collective group that lists one device twice",
        "at once, by `Group::new`",
        a_group_listing_a_device_twice_is_refused
    ),
    misuse!(
        ErrorKind::MismatchedBuffers,
        "Collective buffers of different sizes, or not a whole number of elements",
        "at once, by the collective; nothing is queued",
        collective_buffers_that_do_not_fit_are_refused
    ),
    misuse!(
        ErrorKind::ReleasedHandle,
        "Copying a released handle to another device (`to_client`, or a collective's input)",
        "by the destination's next read or sync of the stream (every rank's, for a collective)",
        a_transfer_of_a_released_handle_fails_on_the_destination
    ),
    misuse!(
        ErrorKind::Disconnected,
        "Dropping a device's last client while a transfer or collective waits for it",
        "by the next read or sync of the waiting streams on the other devices",
        a_device_gone_mid_collective_disconnects_the_others
    ),
    misuse!(
        ErrorKind::Disconnected,
        "Awaiting a read or sync the runtime had not answered when its last client was dropped",
        "by the future",
        a_future_that_outlives_its_runtime_is_disconnected
    ),
    misuse!(
        ErrorKind::TimingUnavailable,
        "Profiling on a backend that keeps no device time (the sim without `kernel_cost`)",
        "by `profile`, after the closure's work ran",
        profiling_where_the_backend_cannot_time_is_an_error
    ),
    misuse!(
        ErrorKind::TraceNotStarted,
        "Stopping a trace that was never started",
        "at once, by `stop_trace`",
        stopping_a_trace_that_was_not_started_is_an_error
    ),
    misuse!(
        ErrorKind::NotCapturable,
        "Reading back (or syncing, or running a collective) inside a capture",
        "at once, by the read or sync, and by `capture`, which returns no graph",
        reading_inside_a_capture_is_an_error
    ),
    misuse!(
        ErrorKind::NestedCapture,
        "Starting a capture inside a capture of the same runtime",
        "at once, by the inner `capture`",
        a_capture_inside_a_capture_is_an_error
    ),
    misuse!(
        ErrorKind::NoSuchNode,
        "Updating a graph command that does not exist, or one of another kind",
        "at once, by the update; the graph is unchanged",
        updating_a_missing_graph_command_is_an_error
    ),
    misuse!(
        ErrorKind::UpdateRefused,
        "Updating a graph's scalar with another type, or its written bytes with another length",
        "at once, by the update; the graph is unchanged",
        a_graph_update_that_does_not_fit_is_an_error
    ),
    misuse!(
        ErrorKind::NoClientLeft,
        "Replaying a graph after every client of its runtime was dropped",
        "at once, by `replay`, which queues nothing",
        replaying_a_graph_with_no_client_left_is_an_error
    ),
    misuse!(
        ErrorKind::Io,
        "Restoring a checkpoint file that does not exist (or cannot be read or written)",
        "at once, by `restore` (or `checkpoint`, which leaves the previous file as it was)",
        restoring_a_missing_checkpoint_is_an_error
    ),
    misuse!(
        ErrorKind::NotACheckpoint,
        "Restoring a file that is not a checkpoint",
        "at once, by `restore` or `inspect`; nothing is allocated",
        restoring_a_file_that_is_not_a_checkpoint_is_an_error
    ),
    misuse!(
        ErrorKind::UnsupportedVersion,
        "Restoring a checkpoint of a format version this build does not read",
        "at once, by `restore` or `inspect`; nothing is allocated",
        restoring_a_checkpoint_of_another_version_is_an_error
    ),
    misuse!(
        ErrorKind::Truncated,
        "Restoring a checkpoint cut short (a partial copy)",
        "at once, by `restore` or `inspect`, naming where it ends; nothing is allocated",
        restoring_a_truncated_checkpoint_is_an_error
    ),
    misuse!(
        ErrorKind::Corrupted,
        "Restoring a checkpoint whose bytes changed",
        "by `restore` or `inspect`, naming the part whose checksum fails; every handle made is dropped",
        restoring_a_corrupted_checkpoint_is_an_error
    ),
    misuse!(
        ErrorKind::TooLargeForDevice,
        "Restoring a checkpoint larger than the device's free memory or largest buffer",
        "at once, by `restore`; nothing is allocated",
        restoring_a_checkpoint_too_large_for_the_device_is_an_error
    ),
    misuse!(
        ErrorKind::DuplicateName,
        "Giving two buffers of a checkpoint the same name",
        "at once, by `checkpoint`; no file is written",
        a_checkpoint_naming_two_buffers_alike_is_an_error
    ),
    misuse!(
        ErrorKind::NotWholeWords,
        "A rollback ring over a buffer that is not whole 4-byte words",
        "at once, by `rollback_ring`; nothing is allocated",
        a_rollback_ring_over_a_buffer_of_odd_bytes_is_an_error
    ),
    misuse!(
        ErrorKind::FrameNotHeld,
        "Rolling back to a frame the ring does not hold (never saved, overwritten, or rolled past)",
        "at once, by `rollback`; nothing is copied",
        rolling_back_to_a_frame_no_longer_held_is_an_error
    ),
];

/// Errors the catalogue has no case for: they need a device this machine may lack, or no
/// misuse causes them. Listed after the misuses.
const OTHER_ERRORS: &[(ErrorKind, &str)] = &[
    (
        ErrorKind::DeviceFault,
        "the device failed running a stream's work: a lost device, or on CUDA the illegal \
         address of an unchecked launch that stores out of bounds, which CUDA makes sticky, so \
         every later read or sync of that runtime reports it (`tests/cuda_fault.rs`, \
         `tests/wgpu_backend.rs`); reported by the next read or sync of the stream",
    ),
    (
        ErrorKind::BackendUnavailable,
        "no driver, adapter or device for the backend; returned by the constructor \
         (`gpuworld::wgpu_client`, `gpuworld::cuda_client`)",
    ),
    (
        ErrorKind::InvalidSetting,
        "an unknown key or a bad value in `gpuworld.toml` or a `GPUWORLD_*` variable, naming \
         the file or variable, the key and what is allowed; returned by \
         `gpuworld::config::Settings::load` (`tests/config.rs` has a case for each)",
    ),
    (
        ErrorKind::DeviceFailed,
        "an allocation on a device that failed earlier (a sticky CUDA fault, a lost wgpu device); \
         `tests/cuda_fault_devices.rs` on two GPUs",
    ),
    (
        ErrorKind::PeerFailed,
        "a rank of a process group (`gpuworld::distributed`) closed its connection, went silent \
         past `GPUWORLD_COLLECTIVE_TIMEOUT_SECS` or failed its part, naming the rank; returned by \
         the collective or transfer of every other rank that needed it, and by every later call \
         that needs the lost connection (`tests/distributed.rs`)",
    ),
    (
        ErrorKind::RendezvousFailed,
        "the ranks of a process group could not meet: a rank that never arrived within \
         `GPUWORLD_RENDEZVOUS_TIMEOUT_SECS` (named), a rank that came twice or a world size the \
         ranks disagree on; returned by `ProcessGroup::join` on every rank \
         (`tests/distributed.rs`)",
    ),
    (
        ErrorKind::StaleHandle,
        "a key into the memory pools outlived its page; a bug in gpuworld if a caller ever sees it",
    ),
];

/// Whether every kind of error has a case in `MISUSES` or a line in `OTHER_ERRORS`, checked
/// when this file compiles: `Error::kind` names every variant of every domain error, so a new
/// variant gets a kind, is in `ErrorKind::ALL`, and this test does not compile until the
/// catalogue has it.
const _: () = {
    let mut i = 0;
    while i < ErrorKind::ALL.len() {
        let kind = ErrorKind::ALL[i];
        if !catalogued(kind) {
            // The kind named is not catalogued: give it a case in `MISUSES` or a line in
            // `OTHER_ERRORS`.
            panic!("{}", kind.name());
        }
        i += 1;
    }
};

/// Whether `kind` has a case in `MISUSES` or a line in `OTHER_ERRORS` (for the check above).
const fn catalogued(kind: ErrorKind) -> bool {
    let mut i = 0;
    while i < MISUSES.len() {
        if same_text(MISUSES[i].kind.name(), kind.name()) {
            return true;
        }
        i += 1;
    }
    let mut i = 0;
    while i < OTHER_ERRORS.len() {
        if same_text(OTHER_ERRORS[i].0.name(), kind.name()) {
            return true;
        }
        i += 1;
    }
    false
}

/// `a == b`, in a const context.
const fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const CATALOGUE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/errors.md");

/// Whether to rewrite `docs/errors.md` instead of checking it (`GPUWORLD_UPDATE_DOCS=1`).
fn update_docs() -> bool {
    std::env::var_os("GPUWORLD_UPDATE_DOCS").is_some_and(|v| v == "1")
}

fn every_misuse_gets_its_error_leaves_the_runtime_usable_and_is_in_docs_errors_md()
-> Result<(), Skip> {
    // The stream names in the messages (`s0`) are then the same in every run.
    StreamId::set_current(StreamId { value: 0 });
    let mut outcomes = Vec::new();
    for misuse in MISUSES {
        eprintln!("misuse case: {}", misuse.case);
        let error = (misuse.run)();
        if let Some(error) = &error {
            assert_eq!(error.kind(), misuse.kind, "{}: {error}", misuse.case);
        }
        outcomes.push((misuse, error));
    }
    if let Some((missing, _)) = outcomes.iter().find(|(_, error)| error.is_none()) {
        assert!(
            !update_docs(),
            "GPUWORLD_UPDATE_DOCS=1 needs every case, and a case was skipped (see above)"
        );
        return Err(Skip(format!(
            "docs/errors.md not checked: the backend of case `{}` is missing",
            missing.case
        )));
    }
    let outcomes: Vec<(&Misuse, Error)> = outcomes
        .into_iter()
        .filter_map(|(misuse, error)| Some((misuse, error?)))
        .collect();
    let rendered = render_catalogue(&outcomes);
    if update_docs() {
        std::fs::write(CATALOGUE, &rendered).unwrap();
        return Ok(());
    }
    let written = std::fs::read_to_string(CATALOGUE).unwrap_or_default();
    if written != rendered {
        let line = written
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| written.lines().count().min(rendered.lines().count()));
        panic!(
            "docs/errors.md is not the catalogue of the cases in tests/errors.rs (first \
             difference at line {}: {:?} there, {:?} from the cases). Rerun with \
             `GPUWORLD_UPDATE_DOCS=1 cargo test --all-features --test errors` to rewrite it, \
             and review the diff.",
            line + 1,
            written.lines().nth(line).unwrap_or(""),
            rendered.lines().nth(line).unwrap_or(""),
        );
    }
    Ok(())
}

/// `docs/errors.md` from the cases and the errors they got.
fn render_catalogue(outcomes: &[(&Misuse, Error)]) -> String {
    let mut doc = String::from(
        "# Errors: what each misuse gets\n\n\
         <!-- Generated by tests/errors.rs from its cases: do not edit. Rewrite it with\n     \
         GPUWORLD_UPDATE_DOCS=1 cargo test --all-features --test errors -->\n\n\
         Every fallible client call returns `gpuworld::Error`, which holds the error of one\n\
         domain (`BindingError`, `LaunchError`, `MemoryError`, ... in `gpuworld::error`; the few\n\
         calls of one layer, such as `Binding::slice` or `Settings::load`, return that domain's\n\
         error, which `?` turns into an `Error`). Its `kind()` names the variant in one call\n\
         (`error.kind() == ErrorKind::OutOfMemory`), as the table does. Each misuse below is a\n\
         case in `tests/errors.rs` that performs it on a real client (the cpu backend; wgpu for\n\
         the compile error), asserts the error, then proves the runtime still works: the data\n\
         written before the misuse reads back intact, and a later create, launch and read give\n\
         the right data. Each message is the error's `Display` text as the case got it (runtime\n\
         numbers renumbered from 1). An error that a launch or write meets while its stream runs\n\
         is the stream's fault: the next read or sync of that stream reports it, once.\n\
         `tests/errors.rs` does not compile while a kind has neither a case here nor a line under\n\
         \"Other errors\".\n\n\
         | misuse | error | reported |\n| --- | --- | --- |\n",
    );
    for (misuse, error) in outcomes {
        doc += &format!(
            "| {} | `{}` | {} |\n",
            misuse.what,
            error.kind(),
            misuse.reported
        );
    }
    for (misuse, error) in outcomes {
        doc += &format!(
            "\n## {}\n\n`{}`, reported {} (`{}`):\n\n```text\n{}\n```\n",
            misuse.what,
            error.kind().path(),
            misuse.reported,
            misuse.case,
            message(error),
        );
    }
    doc += "\n## Other errors\n\n";
    for (kind, why) in OTHER_ERRORS {
        doc += &format!("- `{kind}` (`{}`): {why}.\n", kind.path());
    }
    doc
}

/// The error's message as the catalogue shows it: runtime numbers renumbered, no trailing
/// spaces (an editor would strip them, and the file would no longer match).
fn message(error: &Error) -> String {
    let text = renumber_runtimes(&error.to_string());
    let text = match CHECKPOINT_DIR.get() {
        Some(dir) => text.replace(&dir.path().display().to_string(), "DIR"),
        None => text,
    };
    let lines: Vec<&str> = text.trim_end().lines().map(str::trim_end).collect();
    lines.join("\n")
}

/// `message` with its runtime numbers (`runtime#17`) renumbered from 1 in order of appearance:
/// they count the runtimes the test process made before.
fn renumber_runtimes(message: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find("runtime#") {
        let (before, from) = rest.split_at(at + "runtime#".len());
        let digits = from.chars().take_while(char::is_ascii_digit).count();
        let number = &from[..digits];
        let index = match seen.iter().position(|n| n == number) {
            Some(index) => index,
            None => {
                seen.push(number.to_string());
                seen.len() - 1
            }
        };
        out += before;
        out += &(index + 1).to_string();
        rest = &from[digits..];
    }
    out + rest
}

// The cases, in the catalogue's order.

fn a_client_of_a_device_not_built_in_is_refused() -> Option<Error> {
    let device = gpuworld::DeviceId {
        backend: "tpu",
        index: 0,
    };
    let error = ComputeClient::<CpuBackend>::open_device(device, Driver::Manual)
        .err()
        .unwrap();
    assert!(matches!(
        &error,
        Error::Device(DeviceError::NoSuchDevice { device, .. })
            if &**device == "tpu:0"
    ));
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn a_group_listing_a_device_twice_is_refused() -> Option<Error> {
    let clients = gpuworld::cpu_clients(2, Driver::Manual);
    let twice = vec![clients[1].clone(), clients[0].clone(), clients[1].clone()];
    let error = gpuworld::collective::Group::new(twice).err().unwrap();
    assert_eq!(
        error,
        Error::Collective(CollectiveError::DeviceListedTwice {
            device: "cpu:1".into()
        })
    );
    let kept = clients[1].create(bytes_of(&[2.0; 4]));
    still_works(&clients[1], &kept, &[2.0; 4]);
    Some(error)
}

fn collective_buffers_that_do_not_fit_are_refused() -> Option<Error> {
    use gpuworld::collective::{ElemType, Group, ReduceOp};
    let group = Group::new(gpuworld::cpu_clients(2, Driver::Manual)).unwrap();
    let [a, b] = [&group.clients()[0], &group.clients()[1]];
    let kept = a.create(bytes_of(&[4.0; 4]));
    let other = b.create(bytes_of(&[1.0; 2]));
    let error = group
        .all_reduce(
            &[kept.binding(), other.binding()],
            ElemType::F32,
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(matches!(
        error,
        Error::Collective(CollectiveError::MismatchedBuffers {
            op: "all_reduce",
            ..
        })
    ));
    still_works(a, &kept, &[4.0; 4]);
    still_works(b, &other, &[1.0; 2]);
    Some(error)
}

fn a_transfer_of_a_released_handle_fails_on_the_destination() -> Option<Error> {
    let clients = gpuworld::cpu_clients(2, Driver::Manual);
    let (a, b) = (&clients[0], &clients[1]);
    let kept = b.create(bytes_of(&[6.0; 4]));
    let gone = a.create(bytes_of(&[1.0; 4]));
    let binding = gone.binding();
    drop(gone);
    let _copy = a.to_client(binding, b).unwrap();
    let error = b.sync().unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::ReleasedHandle {
            handle: binding.handle()
        })
    );
    still_works(b, &kept, &[6.0; 4]);
    Some(error)
}

fn a_device_gone_mid_collective_disconnects_the_others() -> Option<Error> {
    use gpuworld::collective::{ElemType, Group, ReduceOp};
    let group = Group::new(gpuworld::cpu_clients(2, Driver::Manual)).unwrap();
    let buffers: Vec<_> = group
        .clients()
        .iter()
        .map(|c| c.create(bytes_of(&[1.0; 4])))
        .collect();
    let bindings: Vec<_> = buffers.iter().map(|h| h.binding()).collect();
    group
        .all_reduce(&bindings, ElemType::F32, ReduceOp::Sum)
        .unwrap();
    let mut clients = group.into_clients();
    drop(clients.pop());
    let error = clients[0].sync().unwrap_err();
    assert_eq!(error, Error::Disconnected);
    still_works(&clients[0], &buffers[0], &[1.0; 4]);
    Some(error)
}

fn reading_a_released_handle_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[9.0; 4]));
    let handle = client.create(bytes_of(&[1.0; 4]));
    let binding = handle.binding();
    drop(handle);
    let error = client.read_one(binding).unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::ReleasedHandle {
            handle: binding.handle()
        })
    );
    assert!(error.to_string().contains("was released"), "{error}");
    still_works(&client, &kept, &[9.0; 4]);
    Some(error)
}

fn leasing_a_released_handle_is_an_error() -> Option<Error> {
    // The sim leases storage ids (the lease of a wgpu buffer is tested in tests/render_lease.rs).
    let client = gpuworld::sim_client(gpuworld::SimConfig::default()).unwrap();
    let handle = client.create(bytes_of(&[1.0; 4]));
    let binding = handle.binding();
    drop(handle);
    let error = client.lease(binding).unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::ReleasedHandle {
            handle: binding.handle()
        })
    );
    client.tick();
    assert!(
        !client.snapshot().contains("held by"),
        "the failed lease left a pin"
    );
    let kept = client.create(bytes_of(&[2.0; 4]));
    assert_eq!(client.lease(&kept).unwrap().size(), 16);
    client.sync().unwrap();
    Some(error)
}

fn launching_with_a_released_handle_reports_on_the_next_sync() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[3.0; 4]));
    let handle = client.empty(16);
    let binding = handle.binding();
    drop(handle);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(binding).scalar_f32(1.0),
        )
        .unwrap();
    let error = client.sync().unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::ReleasedHandle {
            handle: binding.handle()
        })
    );
    still_works(&client, &kept, &[3.0; 4]);
    Some(error)
}

fn a_handle_from_another_runtime_is_rejected() -> Option<Error> {
    let client = cpu();
    let other = cpu();
    let kept = client.create(bytes_of(&[4.0; 2]));
    let foreign = other.create(bytes_of(&[1.0; 2]));
    let error = client.read_one(&foreign).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ForeignHandle { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("belongs to"), "{error}");
    let launch = client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&foreign).scalar_f32(1.0),
    );
    assert!(matches!(
        launch,
        Err(Error::Binding(BindingError::ForeignHandle { .. }))
    ));
    assert!(matches!(
        client.write(&foreign, &[0; 4]),
        Err(Error::Binding(BindingError::ForeignHandle { .. }))
    ));
    still_works(&client, &kept, &[4.0; 2]);
    assert_eq!(f32s(&other.read_one(&foreign).unwrap()), vec![1.0; 2]);
    Some(error)
}

fn offsets_past_the_end_are_rejected() -> Option<Error> {
    let client = cpu();
    let handle = client.create(bytes_of(&[5.0; 4]));
    let past = handle.clone().offset_start(12).offset_end(8);
    let error = client.read_one(&past).unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::OutOfRange {
            handle: handle.id(),
            start: 12,
            end: 8,
            size: 16
        })
    );
    assert!(
        error.to_string().contains("outside the handle's 16 bytes"),
        "{error}"
    );
    let too_far = handle.clone().offset_start(20);
    assert!(matches!(
        client.write(&too_far, &[]),
        Err(Error::Binding(BindingError::OutOfRange { .. }))
    ));
    assert!(matches!(
        client.launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&too_far).scalar_f32(0.0)
        ),
        Err(Error::Binding(BindingError::OutOfRange { .. }))
    ));
    // An in-range offset reads just that range.
    assert_eq!(
        f32s(&client.read_one(&handle.clone().offset_start(8)).unwrap()),
        vec![5.0; 2]
    );
    still_works(&client, &handle, &[5.0; 4]);
    Some(error)
}

fn a_write_larger_than_the_handle_is_rejected_and_writes_nothing() -> Option<Error> {
    let client = cpu();
    let handle = client.create(bytes_of(&[6.0; 2]));
    let error = client.write(&handle, &bytes_of(&[1.0; 3])).unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::WriteTooLarge {
            handle: handle.id(),
            len: 12,
            capacity: 8
        })
    );
    assert!(error.to_string().contains("does not fit"), "{error}");
    still_works(&client, &handle, &[6.0; 2]);
    Some(error)
}

fn a_kernel_given_the_wrong_number_of_bindings_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[7.0; 2]));
    let error = client
        .launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::BindingCount {
            kernel: "add",
            what: "buffer binding",
            expected: 3,
            got: 1
        })
    );
    assert_eq!(
        error.to_string(),
        "kernel `add` takes 3 buffer bindings, got 1"
    );
    let scalars = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept),
        )
        .unwrap_err();
    assert!(
        matches!(
            scalars,
            Error::Launch(LaunchError::BindingCount { what: "scalar", .. })
        ),
        "{scalars}"
    );
    still_works(&client, &kept, &[7.0; 2]);
    Some(error)
}

fn a_scalar_of_the_wrong_type_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[3.0; 2]));
    // `fill` declares `value: f32`; a `u32` 3 would have been the bits of a tiny float.
    let error = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept).scalar_u32(3),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::ScalarType {
            kernel: "fill",
            param: "value",
            declared: gpuworld::kernel::Elem::F32,
            got: gpuworld::kernel::Elem::U32,
        })
    );
    assert!(error.to_string().contains("scalar_f32"), "{error}");
    still_works(&client, &kept, &[3.0; 2]);
    Some(error)
}

fn a_buffer_that_is_not_whole_elements_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[4.0; 2]));
    let error = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&kept.clone().offset_end(2))
                .scalar_f32(0.0),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::BufferElementSize {
            kernel: "fill",
            param: "out",
            elem: gpuworld::kernel::Elem::F32,
            bytes: 6,
        })
    );
    still_works(&client, &kept, &[4.0; 2]);
    Some(error)
}

fn a_binding_not_aligned_to_four_bytes_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[8.0; 4]));
    let error = client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&kept.clone().offset_start(2))
                .scalar_f32(0.0),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::MisalignedBinding {
            kernel: "fill",
            index: 0,
            offset: 2
        })
    );
    still_works(&client, &kept, &[8.0; 4]);
    Some(error)
}

fn a_dynamic_count_shorter_than_three_words_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let count = client.create(bytemuck::cast_slice(&[1u32, 1]).to_vec());
    let error = client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(count.binding()),
            Bindings::new().buffer(&kept).scalar_f32(0.0),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Binding(BindingError::OutOfRange {
            handle: count.id(),
            start: 0,
            end: 12,
            size: 8
        })
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

/// No bindings, one unit per cube.
const NO_BINDINGS: Signature = Signature {
    buffers: &[],
    scalars: &[],
    cube_dim: [1, 1, 1],
};

/// The source type of a backend this binary does not have: any crate can define one.
struct ElsewhereSource;

impl KernelSource for ElsewhereSource {}

static ELSEWHERE_ONLY: KernelDef = KernelDef {
    id: "tests.elsewhere_only",
    name: "elsewhere_only",
    signature: NO_BINDINGS,
    sources: &[&ElsewhereSource],
};

fn a_kernel_without_a_source_for_the_backend_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.5; 2]));
    let error = client
        .launch(&ELSEWHERE_ONLY, CubeCount::new_1d(1), Bindings::new())
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::MissingKernelSource {
            kernel: "elsewhere_only",
            backend: "cpu"
        })
    );
    assert_eq!(
        error.to_string(),
        "kernel `elsewhere_only` has no source for the cpu backend"
    );
    still_works(&client, &kept, &[1.5; 2]);
    Some(error)
}

fn a_cube_count_over_the_devices_limit_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.5; 2]));
    let limit = client.properties().max_cube_count[0];
    let error = client
        .launch(
            &library::FILL,
            CubeCount::Static(limit + 1, 1, 1),
            Bindings::new().buffer(&kept).scalar_f32(0.0),
        )
        .unwrap_err();
    assert_eq!(
        error,
        Error::Launch(LaunchError::CubeCountOverLimit {
            kernel: "fill",
            count: [limit + 1, 1, 1],
            axis: "x",
            limit,
            dynamic: false,
        })
    );
    still_works(&client, &kept, &[1.5; 2]);
    Some(error)
}

/// A cube of 2,048 units: more than any device runs.
static TOO_WIDE: KernelDef = KernelDef {
    id: "tests.too_wide",
    name: "too_wide",
    signature: Signature {
        buffers: &[],
        scalars: &[],
        cube_dim: [2048, 1, 1],
    },
    sources: &[&CpuSource(|_, _| {})],
};

fn a_cube_dim_over_the_devices_limit_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.5; 2]));
    let error = client
        .launch(&TOO_WIDE, CubeCount::new_1d(1), Bindings::new())
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Launch(LaunchError::CubeDimOverLimit {
                kernel: "too_wide",
                what: "x",
                value: 2048,
                limit: 1024,
                ..
            })
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[1.5; 2]);
    Some(error)
}

fn panics_on_cube_one(ctx: &CubeContext, io: &KernelIo<'_>) {
    assert!(ctx.cube_pos[0] != 1, "cube 1 refuses to run");
    io.store_f32(0, ctx.cube_pos[0] as usize, 42.0);
}

/// One `f32` buffer, one unit per cube.
const ONE_BUFFER: Signature = Signature {
    buffers: &[Param::f32("out")],
    scalars: &[],
    cube_dim: [1, 1, 1],
};

static PANICKY: KernelDef = KernelDef {
    id: "tests.panicky",
    name: "panicky",
    signature: ONE_BUFFER,
    sources: &[&CpuSource(panics_on_cube_one)],
};

fn a_kernel_that_panics_is_an_error_on_its_stream_reported_on_the_next_read() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.5; 4]));
    let scratch = client.empty(16);
    client
        .launch(
            &PANICKY,
            CubeCount::new_1d(4),
            Bindings::new().buffer(&scratch),
        )
        .expect("the launch itself is accepted");
    let error = client.read_one(&scratch).unwrap_err();
    match &error {
        Error::Execution(ExecutionError::KernelPanic {
            kernel, message, ..
        }) => {
            assert_eq!(*kernel, "panicky");
            assert!(message.contains("cube 1 refuses to run"), "{message}");
        }
        other => panic!("expected a kernel panic, got {other}"),
    }
    // Reported once: the stream is clean again.
    client.sync().unwrap();
    still_works(&client, &kept, &[2.5; 4]);
    Some(error)
}

/// `x` declared read-only, and a kernel that stores to it all the same.
static STORES_TO_ITS_INPUT: KernelDef = KernelDef {
    id: "tests.stores_to_its_input",
    name: "stores_to_its_input",
    signature: Signature {
        buffers: &[Param::f32("x").read_only(), Param::f32("out")],
        scalars: &[],
        cube_dim: [1, 1, 1],
    },
    sources: &[&CpuSource(|_, io| {
        io.store_f32(1, 0, io.load_f32(0, 0));
        io.store_f32(0, 0, 99.0);
    })],
};

fn a_store_to_a_read_only_buffer_is_an_error_on_its_stream() -> Option<Error> {
    let client = cpu();
    let input = client.create(bytes_of(&[5.0; 2]));
    let output = client.create(bytes_of(&[0.0; 2]));
    client
        .launch(
            &STORES_TO_ITS_INPUT,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&input).buffer(&output),
        )
        .expect("the launch itself is accepted");
    let error = client.sync().unwrap_err();
    assert!(
        matches!(
            error,
            Error::Execution(ExecutionError::ReadOnlyStore {
                kernel: "stores_to_its_input",
                param: "x",
                ..
            })
        ),
        "{error:?}"
    );
    // The store before it landed; the refused one did not.
    assert_eq!(f32s(&client.read_one(&output).unwrap()), vec![5.0, 0.0]);
    still_works(&client, &input, &[5.0; 2]);
    Some(error)
}

/// Every unit stores its cube's index to `out[0]`.
static EVERY_UNIT_STORES_TO_ZERO: KernelDef = KernelDef {
    id: "tests.every_unit_stores_to_zero",
    name: "every_unit_stores_to_zero",
    signature: ONE_BUFFER,
    sources: &[&CpuSource(|ctx, io| {
        io.store_f32(0, 0, ctx.cube_index() as f32)
    })],
};

fn two_units_storing_one_element_is_a_race_on_its_stream() -> Option<Error> {
    let client = cpu();
    let out = client.create(bytes_of(&[1.5; 2]));
    client
        .launch(
            &EVERY_UNIT_STORES_TO_ZERO,
            CubeCount::new_1d(2),
            Bindings::new().buffer(&out),
        )
        .unwrap();
    let error = client.sync().unwrap_err();
    assert!(
        matches!(
            error,
            Error::Execution(ExecutionError::DataRace {
                kernel: "every_unit_stores_to_zero",
                param: "out",
                element: 0,
                ..
            })
        ),
        "{error:?}"
    );
    // The launch ran to its end: the second cube's store is the one left.
    still_works(&client, &out, &[1.0, 1.5]);
    Some(error)
}

fn stores_one_past_the_end(_ctx: &CubeContext, io: &KernelIo<'_>) {
    io.store_f32(0, io.len32(0), 42.0);
}

static PAST_THE_END: KernelDef = KernelDef {
    id: "tests.past_the_end",
    name: "past_the_end",
    signature: ONE_BUFFER,
    sources: &[&CpuSource(stores_one_past_the_end)],
};

fn an_out_of_bounds_store_in_an_unchecked_launch_is_a_kernel_panic_on_the_host() -> Option<Error> {
    let client = cpu();
    let target = client.create(bytes_of(&[1.0; 16]));
    let neighbour = client.create(bytes_of(&[2.5; 16]));
    // SAFETY: deliberately broken: the kernel stores past its binding's end, which a host
    // backend must turn into an error instead of a write into the neighbour.
    unsafe {
        client
            .launch_unchecked(
                &PAST_THE_END,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&target),
            )
            .expect("the launch itself is accepted");
    }
    let error = client.sync().unwrap_err();
    match &error {
        Error::Execution(ExecutionError::KernelPanic {
            kernel, message, ..
        }) => {
            assert_eq!(*kernel, "past_the_end");
            assert!(message.contains("out of bounds"), "{message}");
        }
        other => panic!("expected a kernel panic, got {other:?}"),
    }
    assert_eq!(f32s(&client.read_one(&target).unwrap()), vec![1.0; 16]);
    still_works(&client, &neighbour, &[2.5; 16]);
    Some(error)
}

#[cfg(feature = "wgpu")]
fn a_kernel_that_does_not_compile_is_an_error_on_its_stream() -> Option<Error> {
    static UNPARSABLE: KernelDef = KernelDef {
        id: "tests.unparsable",
        name: "unparsable",
        signature: ONE_BUFFER,
        sources: &[&gpuworld::WgslSource("@compute fn main( {")],
    };
    let client = match common::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual) {
        Ok(client) => client,
        Err(skip) => {
            eprintln!("{}", skip.0);
            return None;
        }
    };
    let kept = client.create(bytes_of(&[4.5; 4]));
    client
        .launch(
            &UNPARSABLE,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&kept),
        )
        .expect("the launch itself is accepted; the stream reports the error");
    let error = client.sync().unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Execution(ExecutionError::Compile { kernel: "unparsable", log })
                if log.contains("pars")
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[4.5; 4]);
    Some(error)
}

#[cfg(not(feature = "wgpu"))]
fn a_kernel_that_does_not_compile_is_an_error_on_its_stream() -> Option<Error> {
    eprintln!("the compile error needs the wgpu feature");
    None
}

fn running_out_of_memory_is_an_error_and_keeps_what_exists() -> Option<Error> {
    let backend = CpuBackend::with_capacity(Some(1024));
    let client = ComputeClient::new(backend, Default::default(), Driver::Manual);
    let kept = client.create(bytes_of(&[1.0; 128]));
    let huge = client.empty(4096);
    let error = client.read_one(&huge).unwrap_err();
    match &error {
        Error::Memory(MemoryError::OutOfMemory {
            requested,
            usage,
            capacity,
        }) => {
            assert_eq!(*requested, 4096);
            assert_eq!(usage.bytes_in_use, 512);
            assert_eq!(*capacity, Some(1024));
        }
        other => panic!("expected out of memory, got {other}"),
    }
    assert!(
        error.to_string().starts_with(
            "out of memory: 4.00 KiB requested with 512 B in use, 512 B reserved and 0 B of it \
             cached (free in pools), of 1.00 KiB device memory; to make room:"
        ),
        "{error}"
    );
    // The failure belongs to the handle: the stream has no fault, other handles read fine.
    client.sync().unwrap();
    drop(huge);
    still_works(&client, &kept, &[1.0; 128]);
    Some(error)
}

fn a_buffer_larger_than_the_device_allows_is_not_out_of_memory() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.5; 16]));
    let huge = client.empty(u64::MAX);
    let error = client.read_one(&huge).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Memory(MemoryError::BufferTooLarge { requested: u64::MAX, limit })
                if limit < u64::MAX
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("split the data"), "{error}");
    client.sync().unwrap();
    drop(huge);
    still_works(&client, &kept, &[1.5; 16]);
    Some(error)
}

fn reading_as_a_type_that_does_not_divide_the_bytes_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[3.5; 4]));
    let error = client
        .read_one_as::<f32>(&kept.clone().offset_end(2))
        .unwrap_err();
    assert_eq!(
        error,
        Error::Layout(LayoutError::ElementSize {
            len: 14,
            elem_size: 4
        })
    );
    still_works(&client, &kept, &[3.5; 4]);
    Some(error)
}

fn tensor_data_that_does_not_match_its_shape_is_rejected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[0.5; 4]));
    let error = client
        .create_tensor(&bytes_of(&[1.0; 5]), &[2, 3], 4)
        .unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Layout(LayoutError::InvalidTensor { reason })
                if reason.contains("needs 24 bytes")
        ),
        "{error}"
    );
    let strides = client.read_tensor(&kept, &[2, 2], &[4, 1], 4).unwrap_err();
    assert!(
        matches!(strides, Error::Layout(LayoutError::InvalidTensor { .. })),
        "{strides}"
    );
    still_works(&client, &kept, &[0.5; 4]);
    Some(error)
}

fn autotuning_a_set_whose_every_candidate_fails_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[6.5; 2]));
    let tuner = Tuner::new(
        &client,
        TunerConfig::default().with_cache(CacheLocation::Disabled),
    );
    let set = Arc::new(
        TunableSet::new(
            "tests.misfits",
            |size: &u32| TuneKey::new([*size]),
            |_, _, size| Ok(*size),
        )
        .candidate("no-buffers", |client, _| {
            client.launch(&library::ADD, CubeCount::new_1d(1), Bindings::new())
        })
        .candidate("no-scalar", |client, _| {
            let out = client.empty(4);
            client.launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&out),
            )
        }),
    );
    let error = tuner.execute(&set, &4).unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Autotune(AutotuneError::AllCandidatesFailed { reasons, .. })
                if reasons.len() == 2
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("takes 3 buffer bindings"),
        "{error}"
    );
    still_works(&client, &kept, &[6.5; 2]);
    Some(error)
}

fn a_future_that_outlives_its_runtime_is_disconnected() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[1.0; 4]));
    let read = client.read_async(&[kept.binding()]);
    let sync = client.sync_async();
    // The last client goes before anything ticked: the runtime answers what was queued.
    drop(client);
    let error = futures_executor::block_on(read).unwrap_err();
    assert_eq!(error, Error::Disconnected);
    assert_eq!(futures_executor::block_on(sync), Err(Error::Disconnected));
    // A handle that outlived its runtime drops without blocking; a new runtime works.
    drop(kept);
    let client = cpu();
    let kept = client.create(bytes_of(&[1.0; 4]));
    still_works(&client, &kept, &[1.0; 4]);
    Some(error)
}

// How some errors are reported, beyond the catalogue.

fn a_kernel_that_panics_is_reported_by_sync_too() {
    let client = cpu();
    let scratch = client.empty(16);
    client
        .launch(
            &PANICKY,
            CubeCount::new_1d(2),
            Bindings::new().buffer(&scratch),
        )
        .unwrap();
    assert!(matches!(
        client.sync(),
        Err(Error::Execution(ExecutionError::KernelPanic { .. }))
    ));
    client.sync().unwrap();
}

fn a_zero_cube_count_is_a_no_op() {
    let client = cpu();
    let handle = client.create(bytes_of(&[3.0; 4]));
    for count in [
        CubeCount::Static(0, 1, 1),
        CubeCount::Static(4, 0, 1),
        CubeCount::Static(1, 1, 0),
    ] {
        client
            .launch(
                &library::FILL,
                count,
                Bindings::new().buffer(&handle).scalar_f32(9.0),
            )
            .unwrap();
    }
    let zero = client.create(bytemuck::cast_slice(&[0u32, 0, 0]).to_vec());
    client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(zero.binding()),
            Bindings::new().buffer(&handle).scalar_f32(9.0),
        )
        .unwrap();
    client.sync().unwrap();
    assert_eq!(f32s(&client.read_one(&handle).unwrap()), vec![3.0; 4]);
}

fn a_failed_allocation_is_reported_by_every_use_of_its_handle_and_by_nothing_else() {
    let backend = CpuBackend::with_capacity(Some(1024));
    let client = ComputeClient::new(backend, Default::default(), Driver::Manual);
    let kept = client.create(bytes_of(&[1.0; 128]));
    let huge = client.empty(4096);
    // The next read on the stream is of another, valid handle: it gets its data.
    assert_eq!(f32s(&client.read_one(&kept).unwrap()), vec![1.0; 128]);
    client.sync().unwrap();
    for _ in 0..2 {
        assert!(
            client
                .read_one(&huge)
                .is_err_and(|error| error.is_out_of_memory())
        );
    }
    // A launch that uses it fails, and reports that on its stream like any failed launch.
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&huge).scalar_f32(2.0),
        )
        .unwrap();
    assert!(client.sync().is_err_and(|error| error.is_out_of_memory()));
    assert_eq!(f32s(&client.read_one(&kept).unwrap()), vec![1.0; 128]);
}

fn profiling_where_the_backend_cannot_time_is_an_error() -> Option<Error> {
    let client = gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    let kept = client.create(bytes_of(&[1.5; 4]));
    let error = client
        .profile(
            || {
                client.launch(
                    &library::FILL,
                    CubeCount::new_1d(1),
                    Bindings::new().buffer(&client.empty(16)).scalar_f32(1.0),
                )
            },
            "fill",
        )
        .unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Profile(ProfileError::TimingUnavailable { backend: "sim", .. })
        ),
        "{error}"
    );
    still_works(&client, &kept, &[1.5; 4]);
    Some(error)
}

fn stopping_a_trace_that_was_not_started_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.5; 4]));
    let error = client.stop_trace().unwrap_err();
    assert_eq!(error, Error::Profile(ProfileError::TraceNotStarted));
    still_works(&client, &kept, &[2.5; 4]);
    Some(error)
}

/// A graph of one `FILL` of `x` on `client`.
fn fill_graph(
    client: &ComputeClient<CpuBackend>,
    x: &gpuworld::Handle,
) -> gpuworld::Graph<CpuBackend> {
    client
        .capture(|c| {
            c.launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(x).scalar_f32(5.0),
            )
        })
        .expect("a capture of one launch")
}

fn reading_inside_a_capture_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let mut inner = None;
    let error = client
        .capture(|c| {
            inner = Some(c.read_one(&kept).map(|b| b.len()));
            Ok(())
        })
        .unwrap_err();
    assert_eq!(
        error,
        Error::Graph(GraphError::NotCapturable { call: "read" })
    );
    assert_eq!(inner, Some(Err(error.clone())));
    assert!(error.to_string().contains("cannot be captured"), "{error}");
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn a_capture_inside_a_capture_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[3.0; 4]));
    let mut inner = None;
    client
        .capture(|c| {
            inner = Some(c.capture(|_| Ok(())).map(|g| g.len()));
            Ok(())
        })
        .expect("the outer capture");
    let error = inner.unwrap().unwrap_err();
    assert_eq!(error, Error::Graph(GraphError::NestedCapture));
    still_works(&client, &kept, &[3.0; 4]);
    Some(error)
}

fn updating_a_missing_graph_command_is_an_error() -> Option<Error> {
    let client = cpu();
    let x = client.create(bytes_of(&[0.0; 256]));
    let mut graph = fill_graph(&client, &x);
    let error = graph.set_scalar_f32(3, 0, 1.0).unwrap_err();
    assert!(matches!(
        error,
        Error::Graph(GraphError::NoSuchNode {
            node: 3,
            nodes: 1,
            ..
        })
    ));
    graph.replay().unwrap();
    still_works(&client, &x, &[5.0; 256]);
    Some(error)
}

fn a_graph_update_that_does_not_fit_is_an_error() -> Option<Error> {
    let client = cpu();
    let x = client.create(bytes_of(&[0.0; 256]));
    let mut graph = fill_graph(&client, &x);
    let error = graph.set_scalar_u32(0, 0, 7).unwrap_err();
    assert!(matches!(
        error,
        Error::Graph(GraphError::UpdateRefused { node: 0, .. })
    ));
    assert!(error.to_string().contains("not U32"), "{error}");
    graph.replay().unwrap();
    still_works(&client, &x, &[5.0; 256]);
    Some(error)
}

fn replaying_a_graph_with_no_client_left_is_an_error() -> Option<Error> {
    let client = cpu();
    let x = client.create(bytes_of(&[0.0; 256]));
    let graph = fill_graph(&client, &x);
    graph.replay().expect("a replay while a client is held");
    let other = client.clone();
    drop(client);
    graph.replay().expect("a replay while a clone is held");
    drop(other);
    let error = graph.replay().unwrap_err();
    assert!(matches!(
        error,
        Error::Graph(GraphError::NoClientLeft { .. })
    ));
    Some(error)
}

/// Where the checkpoint cases write their files; shown as `DIR` in the catalogue.
static CHECKPOINT_DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();

/// A file of the checkpoint cases' directory.
fn checkpoint_path(name: &str) -> std::path::PathBuf {
    let dir = CHECKPOINT_DIR.get_or_init(|| tempfile::tempdir().unwrap());
    dir.path().join(name)
}

/// A checkpoint of one 16-byte buffer named `state`, written by `client`: its path and bytes.
fn a_checkpoint(client: &ComputeClient<CpuBackend>, name: &str) -> (std::path::PathBuf, Vec<u8>) {
    let path = checkpoint_path(name);
    let state = client.create(bytes_of(&[0.5; 4]));
    let checkpoint = Checkpoint::new()
        .buffer("state", &state)
        .meta(CheckpointMeta::at_tick(7));
    client.checkpoint(&path, checkpoint).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn restoring_a_missing_checkpoint_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let error = client.restore(checkpoint_path("missing.ckpt")).unwrap_err();
    assert!(
        matches!(error, Error::Checkpoint(CheckpointError::Io { .. })),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn restoring_a_file_that_is_not_a_checkpoint_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let path = checkpoint_path("notes.txt");
    std::fs::write(&path, "tick 7, all is well").unwrap();
    let error = client.restore(&path).unwrap_err();
    assert!(
        matches!(&error, Error::Checkpoint(CheckpointError::NotACheckpoint { found, .. }) if found == b"tick 7, "),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn restoring_a_checkpoint_of_another_version_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let (path, mut bytes) = a_checkpoint(&client, "version.ckpt");
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let error = client.restore(&path).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::UnsupportedVersion {
                version: 2,
                supported: 1,
                ..
            })
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn restoring_a_truncated_checkpoint_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let (path, bytes) = a_checkpoint(&client, "cut.ckpt");
    std::fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
    client.sync().unwrap();
    let in_use = client.memory_usage().bytes_in_use;
    let error = client.restore(&path).unwrap_err();
    assert!(
        matches!(error, Error::Checkpoint(CheckpointError::Truncated { .. })),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("buffer 0 (\"state\")"),
        "{error}"
    );
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_in_use, in_use);
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn restoring_a_corrupted_checkpoint_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let (path, mut bytes) = a_checkpoint(&client, "flipped.ckpt");
    // A bit of the buffer's last byte, just before its checksum and the 24-byte trailer.
    let at = bytes.len() - 24 - 4 - 1;
    bytes[at] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    client.sync().unwrap();
    let in_use = client.memory_usage().bytes_in_use;
    let error = client.restore(&path).unwrap_err();
    assert!(
        matches!(error, Error::Checkpoint(CheckpointError::Corrupted { .. })),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("buffer 0 (\"state\")"),
        "{error}"
    );
    client.sync().unwrap();
    client.sync().unwrap();
    assert_eq!(
        client.memory_usage().bytes_in_use,
        in_use,
        "the restored handle was dropped"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn restoring_a_checkpoint_too_large_for_the_device_is_an_error() -> Option<Error> {
    let path = checkpoint_path("large.ckpt");
    let writer = cpu();
    let state = writer.create(vec![0u8; 4096]);
    writer
        .checkpoint(&path, Checkpoint::new().buffer("state", &state))
        .unwrap();
    let backend = CpuBackend::with_capacity(Some(1024));
    let client = ComputeClient::new(backend, Default::default(), Driver::Manual);
    let kept = client.create(bytes_of(&[2.0; 4]));
    client.sync().unwrap();
    let error = client.restore(&path).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::TooLargeForDevice {
                needed: 4096,
                limit: 1008,
                ..
            })
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn a_checkpoint_naming_two_buffers_alike_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let path = checkpoint_path("twice.ckpt");
    let checkpoint = Checkpoint::new()
        .buffer("state", &kept)
        .buffer("state", &kept);
    let error = client.checkpoint(&path, checkpoint).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::DuplicateName { .. })
        ),
        "{error:?}"
    );
    assert!(!path.exists());
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn a_rollback_ring_over_a_buffer_of_odd_bytes_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let error = client
        .rollback_ring([&kept.clone().offset_end(2)], 4)
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::NotWholeWords {
                index: 0,
                size: 14,
                offset: 0
            })
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

fn rolling_back_to_a_frame_no_longer_held_is_an_error() -> Option<Error> {
    let client = cpu();
    let kept = client.create(bytes_of(&[2.0; 4]));
    let mut ring = client.rollback_ring([&kept], 2).unwrap();
    for frame in 10..13 {
        ring.save(frame).unwrap();
    }
    let error = ring.rollback(10).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::FrameNotHeld { frame: 10, .. })
        ),
        "{error:?}"
    );
    still_works(&client, &kept, &[2.0; 4]);
    Some(error)
}

//! Host memory over a long run (issue 30): a steady loop that creates, uses and drops handles
//! leaves the process's resident memory flat once warm, whatever `memory_usage()` says about the
//! device. Resident memory is process-wide, so this binary holds this one test only; it reads
//! `/proc/self/status` and is reported ignored where there is none.

mod common;

use common::Skip;
use gpuworld::Driver;

test_main![resident_memory_stays_flat_while_handles_are_created_and_dropped];

/// Handles made before measuring: queues, free lists and the allocator's arenas reach their
/// working size.
const WARM_UP: u64 = 20_000;

/// Handles made while measuring.
const MEASURED: u64 = 100_000;

/// What a handle may leave behind, on average, in resident memory: 16 bytes of noise, where a
/// record kept per handle ever made costs about ten times as much.
const BYTES_PER_HANDLE: u64 = 16;

/// Every this many handles the loop reads the last one back (blocking), so the device keeps up.
const READ_EVERY: u64 = 1_000;

/// The process's resident memory in bytes, where the system says.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

fn resident_memory_stays_flat_while_handles_are_created_and_dropped() -> Result<(), Skip> {
    if resident_bytes().is_none() {
        return Err(Skip(
            "no /proc/self/status on this system, so resident memory cannot be measured".into(),
        ));
    }
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let data = [7u8; 256];
    let make_and_drop = |handles: u64| {
        for i in 1..=handles {
            let handle = client.create_from_slice(&data);
            if i % READ_EVERY == 0 {
                let back = client.read_one(&handle).expect("the read succeeds");
                assert_eq!(&back[..], &data[..]);
            }
        }
    };
    make_and_drop(WARM_UP);
    let before = resident_bytes().expect("read before");
    make_and_drop(MEASURED);
    let after = resident_bytes().expect("read after");

    let growth = after.saturating_sub(before);
    eprintln!(
        "resident memory {} KiB -> {} KiB over {MEASURED} handles: {:.1} bytes per handle",
        before / 1024,
        after / 1024,
        growth as f64 / MEASURED as f64
    );
    assert!(
        growth <= MEASURED * BYTES_PER_HANDLE,
        "resident memory grew by {growth} bytes over {MEASURED} handles ({:.1} per handle, at \
         most {BYTES_PER_HANDLE} allowed) while the device reports {:?}: something keeps a \
         record of every handle ever made",
        growth as f64 / MEASURED as f64,
        client.memory_usage()
    );
    Ok(())
}

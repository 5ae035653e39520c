//! The tick's instruction count on the sim: `N` pairs of a launch of `ADD` (256 elements, 3
//! bindings) and a `read_one` of its 1 KiB output, on `sim_client(SimConfig::default())`. Run
//! under callgrind at two `N` and divide the difference by the difference of `N`, so opening the
//! runtime cancels out (`docs/benchmarks.md`, "Sim launch + `read_one`"):
//!
//! ```sh
//! .ci/sim-instructions        # builds this example in release and prints instructions per pair
//! ```

use gpuworld::{Bindings, CubeCount, SimConfig, library, sim_client};
use std::process::ExitCode;

fn main() -> ExitCode {
    let pairs = match std::env::args().nth(1).map(|n| n.parse::<u64>()) {
        None => 1_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("sim_instructions: the one argument is the number of pairs to run");
            return ExitCode::FAILURE;
        }
    };
    match run(pairs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sim_instructions: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `pairs` launches of `ADD`, each followed by a read of its output.
fn run(pairs: u64) -> Result<(), gpuworld::Error> {
    let client = sim_client(SimConfig::default())?;
    let x = client.create_from_slice(&[0u8; 1024]);
    for _ in 0..pairs {
        client.launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&x).buffer(&x).buffer(&x),
        )?;
        std::hint::black_box(client.read_one(&x)?);
    }
    Ok(())
}

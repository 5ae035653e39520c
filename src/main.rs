//! The `gpuworld` job binary: parses the command line, sets up logging and runs one subcommand.
//! Every failure ends here as `error: ...` on stderr with the exit code its kind calls for.

mod cli;

use clap::Parser;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    init_tracing();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A closed stderr leaves nowhere to report to; the exit code still tells.
            let _ = writeln!(std::io::stderr(), "error: {error}");
            error.exit_code()
        }
    }
}

fn init_tracing() {
    // An unset or malformed RUST_LOG must not stop the job, so both fall back to `warn`.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes would only litter a log file or a CI capture.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

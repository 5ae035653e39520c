//! The command line of `gpuworld`: its subcommands; `error.rs` holds the one error type a
//! subcommand can end with.

mod backends;
mod checkpoint;
mod config;
mod demo;
mod demo_args;
mod demo_devices;
mod demo_processes;
mod error;
mod field_stats;
mod heat;
mod heat_slabs;
mod heatmap;
mod info;
mod kernel_table;
mod launch;
mod replay;
mod summary;

pub use error::CliError;

use clap::{Parser, Subcommand};

/// The parsed command line.
#[derive(Parser, Debug)]
#[command(
    name = "gpuworld",
    version,
    about = "Run compute jobs on a gpuworld runtime",
    long_about = "Run compute jobs on a gpuworld runtime. Without a subcommand, runs `demo` \
                  with its defaults."
)]
pub struct Cli {
    /// What to run; `demo` when left out.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Simulate heat diffusion on a square grid and write the final field as a PNG (the default)
    Demo(demo_args::DemoArgs),
    /// List the backends built into this binary and their devices
    Info,
    /// Replay a recorded command stream tick for tick and print what its reads returned
    Replay(replay::ReplayArgs),
    /// Print the effective configuration and where each value came from
    Config,
    /// Start one process per device with torchrun's variables set, and stop all if one fails
    Launch(launch::LaunchArgs),
    /// Inspect a checkpoint file written by `demo --checkpoint` or `ComputeClient::checkpoint`
    Checkpoint(checkpoint::CheckpointArgs),
}

/// Runs the subcommand of `cli`.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Some(Command::Demo(args)) => demo::run(&args),
        None => demo::run(&demo_args::DemoArgs::default()),
        Some(Command::Info) => info::run(),
        Some(Command::Replay(args)) => replay::run(&args),
        Some(Command::Config) => config::run(),
        Some(Command::Launch(args)) => Ok(launch::run(&args)?),
        Some(Command::Checkpoint(args)) => checkpoint::run(&args),
    }
}

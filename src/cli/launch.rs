//! `gpuworld launch`: starts one process per device with the variables torchrun sets (`RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), and supervises
//! them: the first to fail stops the others, and the launch fails naming it.

use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// How often the launcher looks at its processes.
const POLL: Duration = Duration::from_millis(10);

/// The arguments of `gpuworld launch`.
#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// Processes to start on this node, one per device
    #[arg(long)]
    nproc_per_node: usize,
    /// Nodes taking part, each running `gpuworld launch` with the same arguments
    #[arg(long, default_value_t = 1)]
    nnodes: usize,
    /// This node's index, 0..nnodes; node 0 runs rank 0
    #[arg(long, default_value_t = 0)]
    node_rank: usize,
    /// The host rank 0 listens on
    #[arg(long, default_value = "127.0.0.1")]
    master_addr: String,
    /// The port rank 0 listens on; a free one when left out (one node only)
    #[arg(long)]
    master_port: Option<u16>,
    /// The program to start, then its arguments (after `--`)
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// Why a launch failed.
#[derive(thiserror::Error, Debug)]
pub enum LaunchError {
    /// The arguments do not describe a world.
    #[error("gpuworld launch: {0}")]
    Arguments(String),
    /// No free port could be found for the rendezvous.
    #[error("gpuworld launch: no free port on {addr} for the rendezvous: {source}")]
    NoFreePort {
        /// The address a port was looked for on.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("gpuworld launch: cannot start `{program}` for rank {rank}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The rank it was for.
        rank: usize,
        /// What the system said.
        source: std::io::Error,
    },
    /// A rank failed; the others were stopped.
    #[error("gpuworld launch: rank {rank} {how}; stopped the other ranks")]
    RankFailed {
        /// The first rank seen failing.
        rank: usize,
        /// How it ended: its exit code or signal.
        how: String,
    },
    /// The launcher could not watch its processes.
    #[error("gpuworld launch: cannot wait for rank {rank}: {source}")]
    Wait {
        /// The rank being watched.
        rank: usize,
        /// What the system said.
        source: std::io::Error,
    },
}

impl LaunchError {
    /// Whether the arguments were refused before anything started.
    pub fn is_usage(&self) -> bool {
        matches!(self, LaunchError::Arguments(_))
    }
}

/// Starts the ranks of this node and waits until all succeed or one fails.
pub fn run(args: &LaunchArgs) -> Result<(), LaunchError> {
    if args.nproc_per_node == 0 || args.nnodes == 0 {
        return Err(LaunchError::Arguments(
            "--nproc-per-node and --nnodes must be at least 1".into(),
        ));
    }
    if args.node_rank >= args.nnodes {
        return Err(LaunchError::Arguments(format!(
            "--node-rank {} is not below --nnodes {}",
            args.node_rank, args.nnodes
        )));
    }
    let port = match args.master_port {
        Some(port) => port,
        None if args.nnodes > 1 => {
            return Err(LaunchError::Arguments(
                "--master-port is needed with several nodes: they must agree on it".into(),
            ));
        }
        None => free_port(&args.master_addr)?,
    };
    let world = args.nproc_per_node * args.nnodes;
    let (program, program_args) = args
        .command
        .split_first()
        .ok_or_else(|| LaunchError::Arguments("no program to launch after `--`".into()))?;
    let mut children: Vec<(usize, Child)> = Vec::with_capacity(args.nproc_per_node);
    for local in 0..args.nproc_per_node {
        let rank = args.node_rank * args.nproc_per_node + local;
        let spawned = Command::new(program)
            .args(program_args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("LOCAL_WORLD_SIZE", args.nproc_per_node.to_string())
            .env("GROUP_RANK", args.node_rank.to_string())
            .env("MASTER_ADDR", &args.master_addr)
            .env("MASTER_PORT", port.to_string())
            .spawn();
        match spawned {
            Ok(child) => children.push((rank, child)),
            Err(source) => {
                stop(&mut children);
                return Err(LaunchError::Spawn {
                    program: program.clone(),
                    rank,
                    source,
                });
            }
        }
    }
    tracing::info!(world, port, "launched {} ranks", children.len());
    supervise(children)
}

/// Waits for every child; at the first that fails, stops the rest and names it.
fn supervise(mut children: Vec<(usize, Child)>) -> Result<(), LaunchError> {
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            let (rank, child) = &mut children[i];
            let rank = *rank;
            match child.try_wait() {
                Ok(None) => i += 1,
                Ok(Some(status)) if status.success() => {
                    children.swap_remove(i);
                }
                Ok(Some(status)) => {
                    children.swap_remove(i);
                    stop(&mut children);
                    return Err(LaunchError::RankFailed {
                        rank,
                        how: describe(status),
                    });
                }
                Err(source) => {
                    stop(&mut children);
                    return Err(LaunchError::Wait { rank, source });
                }
            }
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Kills and reaps every child still running.
fn stop(children: &mut Vec<(usize, Child)>) {
    for (rank, child) in children.iter_mut() {
        // One that already exited cannot be killed; reaping it is all that is left.
        if let Err(error) = child.kill() {
            tracing::debug!(rank, %error, "rank already ended");
        }
        let _ = child.wait();
    }
    children.clear();
}

/// How a process ended, in words.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended: {status}")
}

/// A port nobody listens on at `addr` now. Another process could take it before rank 0 binds
/// it; torchrun takes the same chance.
fn free_port(addr: &str) -> Result<u16, LaunchError> {
    let no_port = |source| LaunchError::NoFreePort {
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind((addr, 0)).map_err(no_port)?;
    Ok(listener.local_addr().map_err(no_port)?.port())
}

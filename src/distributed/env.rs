//! Where a process finds its place in a process group: its rank, the world size, its local rank
//! and the rendezvous address, from the variables torchrun, Open MPI or Slurm set, or given
//! explicitly.

use gpuworld_systems::error::ConfigError;
use gpuworld_systems::{Error, Result};
use std::time::Duration;

/// The rendezvous timeout's variable: seconds (fractions allowed) rank 0 waits for every rank.
pub const RENDEZVOUS_TIMEOUT_ENV: &str = "GPUWORLD_RENDEZVOUS_TIMEOUT_SECS";
/// The collectives' timeout variable: seconds a rank waits for a peer's bytes before failing.
pub const COLLECTIVE_TIMEOUT_ENV: &str = "GPUWORLD_COLLECTIVE_TIMEOUT_SECS";
/// The variable that says where collectives of GPU ranks run: `auto`, `device` or `host`
/// ([`CollectivesOn`]).
pub const PROCESS_COLLECTIVES_ENV: &str = "GPUWORLD_PROCESS_COLLECTIVES";
/// How long the rendezvous and each socket read or write wait when no variable says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A launcher's variables for rank, world size and local rank, in the order they are looked for.
const SCHEMES: [Scheme; 3] = [
    Scheme {
        launcher: "torchrun",
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
    },
    Scheme {
        launcher: "Open MPI",
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    },
    Scheme {
        launcher: "Slurm",
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
    },
];

/// The names one launcher gives rank, world size and local rank.
#[derive(Debug, Clone, Copy)]
struct Scheme {
    launcher: &'static str,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
}

/// A process's place in a process group and how to reach the others; the input of
/// [`super::ProcessGroup::join`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProcessGroupConfig {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// How many processes the group has.
    pub world_size: usize,
    /// This process's rank among those of its host (which GPU it takes, later).
    pub local_rank: usize,
    /// The host rank 0 listens on (`MASTER_ADDR`).
    pub master_addr: String,
    /// The port rank 0 listens on (`MASTER_PORT`).
    pub master_port: u16,
    /// How long rank 0 waits for every rank, and every rank for rank 0 to answer.
    pub rendezvous_timeout: Duration,
    /// How long a collective or transfer waits on one socket read or write, and how long a
    /// collective on the devices may stay in flight before the group is aborted.
    pub io_timeout: Duration,
    /// Where the collectives run when the clients' backend can run them on the devices.
    pub collectives_on: CollectivesOn,
}

/// Where a process group's collectives run for clients whose backend has collectives across
/// processes (CUDA's NCCL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CollectivesOn {
    /// On the devices where every rank can; otherwise through host memory over the group's TCP
    /// connections, with a warning naming the ranks that could not.
    #[default]
    Auto,
    /// On the devices, or an error naming the ranks that cannot.
    Device,
    /// Through host memory over the group's TCP connections, always.
    Host,
}

impl ProcessGroupConfig {
    /// An explicit place: rank `rank` of `world_size`, rendezvous at `master_addr:master_port`,
    /// local rank equal to the rank and the default timeouts; `ConfigError::InvalidSetting`
    /// when the rank is not below the world size.
    pub fn new(
        rank: usize,
        world_size: usize,
        master_addr: impl Into<String>,
        master_port: u16,
    ) -> Result<ProcessGroupConfig> {
        if rank >= world_size {
            return Err(invalid(
                "ProcessGroupConfig::new",
                format!("rank {rank} is not below the world size {world_size}"),
            ));
        }
        Ok(ProcessGroupConfig {
            rank,
            world_size,
            local_rank: rank,
            master_addr: master_addr.into(),
            master_port,
            rendezvous_timeout: DEFAULT_TIMEOUT,
            io_timeout: DEFAULT_TIMEOUT,
            collectives_on: CollectivesOn::Auto,
        })
    }

    /// The place this process's environment describes; see [`ProcessGroupConfig::from_vars`].
    pub fn from_env() -> Result<ProcessGroupConfig> {
        ProcessGroupConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// The place the variables `var` returns describe. Rank and world size come from torchrun's
    /// `RANK`/`WORLD_SIZE`/`LOCAL_RANK`, else Open MPI's `OMPI_COMM_WORLD_*`, else Slurm's
    /// `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID`: the first launcher whose rank is set wins,
    /// because an outer launcher's variables stay set for an inner one (srun starting torchrun).
    /// The address is always `MASTER_ADDR`/`MASTER_PORT`. A missing local rank is the rank (one
    /// host). A missing, unparseable or contradictory value is `ConfigError::InvalidSetting`
    /// naming the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ProcessGroupConfig> {
        let Some(scheme) = SCHEMES.iter().find(|s| var(s.rank).is_some()) else {
            if let Some(size) = SCHEMES.iter().find(|s| var(s.size).is_some()) {
                return Err(invalid(
                    size.size,
                    format!("is set but {} is not", size.rank),
                ));
            }
            return Err(invalid(
                "RANK",
                "no rank found: set RANK and WORLD_SIZE (torchrun), or start under mpirun or \
                 srun, or give the rank explicitly (ProcessGroupConfig::new)"
                    .into(),
            ));
        };
        let rank = number(&var, scheme.rank)?;
        let world_size = number(&var, scheme.size)?.ok_or_else(|| {
            invalid(
                scheme.size,
                format!("is not set, but {} is ({})", scheme.rank, scheme.launcher),
            )
        })?;
        let rank = rank.unwrap_or_default();
        if world_size == 0 {
            return Err(invalid(
                scheme.size,
                "a world needs at least one rank".into(),
            ));
        }
        if rank >= world_size {
            return Err(invalid(
                scheme.rank,
                format!("rank {rank} is not below {}={world_size}", scheme.size),
            ));
        }
        let local_rank = number(&var, scheme.local_rank)?.unwrap_or(rank);
        if local_rank > rank {
            return Err(invalid(
                scheme.local_rank,
                format!("local rank {local_rank} is above the rank {rank}"),
            ));
        }
        let master_addr = var("MASTER_ADDR").filter(|a| !a.trim().is_empty());
        let master_addr = master_addr.ok_or_else(|| {
            invalid(
                "MASTER_ADDR",
                "is not set: the host of rank 0, where every rank meets".into(),
            )
        })?;
        let master_port = number(&var, "MASTER_PORT")?.ok_or_else(|| {
            invalid(
                "MASTER_PORT",
                "is not set: the port rank 0 listens on".into(),
            )
        })?;
        let master_port = u16::try_from(master_port)
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                invalid(
                    "MASTER_PORT",
                    format!("{master_port} is not a port (1-65535)"),
                )
            })?;
        Ok(ProcessGroupConfig {
            rank,
            world_size,
            local_rank,
            master_addr: master_addr.trim().to_owned(),
            master_port,
            rendezvous_timeout: seconds(&var, RENDEZVOUS_TIMEOUT_ENV)?.unwrap_or(DEFAULT_TIMEOUT),
            io_timeout: seconds(&var, COLLECTIVE_TIMEOUT_ENV)?.unwrap_or(DEFAULT_TIMEOUT),
            collectives_on: collectives_on(&var)?,
        })
    }

    /// This config with its collectives run `on` the devices, the host, or where they can.
    pub fn with_collectives_on(mut self, on: CollectivesOn) -> ProcessGroupConfig {
        self.collectives_on = on;
        self
    }

    /// This config with the rendezvous timeout `timeout`.
    pub fn with_rendezvous_timeout(mut self, timeout: Duration) -> ProcessGroupConfig {
        self.rendezvous_timeout = timeout;
        self
    }

    /// This config with the timeout of each socket read and write of collectives `timeout`.
    pub fn with_io_timeout(mut self, timeout: Duration) -> ProcessGroupConfig {
        self.io_timeout = timeout;
        self
    }
}

/// [`PROCESS_COLLECTIVES_ENV`]'s choice, `Auto` when unset.
fn collectives_on(var: &impl Fn(&str) -> Option<String>) -> Result<CollectivesOn> {
    match var(PROCESS_COLLECTIVES_ENV).as_deref().map(str::trim) {
        None | Some("") | Some("auto") => Ok(CollectivesOn::Auto),
        Some("device") => Ok(CollectivesOn::Device),
        Some("host") => Ok(CollectivesOn::Host),
        Some(other) => Err(invalid(
            PROCESS_COLLECTIVES_ENV,
            format!("`{other}` is none of auto, device, host"),
        )),
    }
}

/// The whole number in `name`, if set.
fn number(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>> {
    let Some(text) = var(name) else {
        return Ok(None);
    };
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| invalid(name, format!("`{text}` is not a whole number")))
}

/// The positive seconds in `name`, if set.
fn seconds(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<Duration>> {
    let Some(text) = var(name) else {
        return Ok(None);
    };
    let parsed: Option<f64> = text.trim().parse().ok();
    match parsed.and_then(|s| Duration::try_from_secs_f64(s).ok()) {
        Some(duration) if !duration.is_zero() => Ok(Some(duration)),
        _ => Err(invalid(
            name,
            format!("`{text}` is not a positive number of seconds"),
        )),
    }
}

fn invalid(origin: &str, problem: String) -> Error {
    Error::Config(ConfigError::InvalidSetting {
        origin: origin.into(),
        problem: problem.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<ProcessGroupConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProcessGroupConfig::from_vars(|name| vars.get(name).cloned())
    }

    /// The variable the error names, and its message.
    fn refused(vars: &[(&str, &str)]) -> (String, String) {
        match parse(vars) {
            Err(Error::Config(ConfigError::InvalidSetting { origin, problem })) => {
                (origin.to_string(), problem.to_string())
            }
            other => panic!("{vars:?} should be refused, got {other:?}"),
        }
    }

    const ADDR: [(&str, &str); 2] = [("MASTER_ADDR", "node0"), ("MASTER_PORT", "29500")];

    #[test]
    fn torchrun_variables_give_rank_world_local_rank_and_address() {
        let config = parse(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ADDR[0],
            ADDR[1],
            (RENDEZVOUS_TIMEOUT_ENV, "2.5"),
        ])
        .unwrap();
        assert_eq!(
            (config.rank, config.world_size, config.local_rank),
            (5, 8, 1)
        );
        assert_eq!(
            (config.master_addr.as_str(), config.master_port),
            ("node0", 29500)
        );
        assert_eq!(config.rendezvous_timeout, Duration::from_millis(2500));
        assert_eq!(config.io_timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn open_mpi_and_slurm_variables_are_found_when_torchrun_s_are_not() {
        let mpi = parse(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ADDR[0],
            ADDR[1],
        ])
        .unwrap();
        assert_eq!((mpi.rank, mpi.world_size, mpi.local_rank), (3, 4, 1));
        let slurm = parse(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "3"),
            ADDR[0],
            ADDR[1],
        ])
        .unwrap();
        assert_eq!((slurm.rank, slurm.world_size, slurm.local_rank), (2, 3, 2));
    }

    #[test]
    fn where_collectives_run_comes_from_its_variable() {
        let base = [("RANK", "0"), ("WORLD_SIZE", "2"), ADDR[0], ADDR[1]];
        let with = |value| {
            let mut vars = base.to_vec();
            vars.push((PROCESS_COLLECTIVES_ENV, value));
            parse(&vars)
        };
        assert_eq!(parse(&base).unwrap().collectives_on, CollectivesOn::Auto);
        assert_eq!(
            with("device").unwrap().collectives_on,
            CollectivesOn::Device
        );
        assert_eq!(with("host").unwrap().collectives_on, CollectivesOn::Host);
        let error = with("nccl").unwrap_err().to_string();
        assert!(
            error.contains(PROCESS_COLLECTIVES_ENV) && error.contains("`nccl`"),
            "{error}"
        );
    }

    #[test]
    fn torchrun_inside_slurm_takes_torchrun_s_rank() {
        let config = parse(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("RANK", "6"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "2"),
            ADDR[0],
            ADDR[1],
        ])
        .unwrap();
        assert_eq!((config.rank, config.world_size), (6, 8));
    }

    #[test]
    fn missing_unparseable_or_contradictory_values_name_their_variable() {
        assert_eq!(refused(&[ADDR[0], ADDR[1]]).0, "RANK");
        assert_eq!(
            refused(&[("WORLD_SIZE", "2"), ADDR[0], ADDR[1]]).0,
            "WORLD_SIZE"
        );
        assert_eq!(refused(&[("RANK", "0"), ADDR[0], ADDR[1]]).0, "WORLD_SIZE");
        let (var, problem) = refused(&[("RANK", "one"), ("WORLD_SIZE", "2"), ADDR[0], ADDR[1]]);
        assert_eq!(var, "RANK");
        assert!(problem.contains("`one`"), "{problem}");
        let (var, problem) = refused(&[("RANK", "2"), ("WORLD_SIZE", "2"), ADDR[0], ADDR[1]]);
        assert_eq!(var, "RANK");
        assert!(problem.contains("WORLD_SIZE=2"), "{problem}");
        assert_eq!(
            refused(&[("RANK", "0"), ("WORLD_SIZE", "0"), ADDR[0], ADDR[1]]).0,
            "WORLD_SIZE"
        );
        let slurm = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
        assert_eq!(refused(&[slurm[0], slurm[1], ADDR[1]]).0, "MASTER_ADDR");
        assert_eq!(refused(&[slurm[0], slurm[1], ADDR[0]]).0, "MASTER_PORT");
        let port = refused(&[slurm[0], slurm[1], ADDR[0], ("MASTER_PORT", "70000")]);
        assert_eq!(port.0, "MASTER_PORT");
        let timeout = refused(&[
            slurm[0],
            slurm[1],
            ADDR[0],
            ADDR[1],
            (COLLECTIVE_TIMEOUT_ENV, "0"),
        ]);
        assert_eq!(timeout.0, COLLECTIVE_TIMEOUT_ENV);
        let local = refused(&[slurm[0], slurm[1], ("SLURM_LOCALID", "1"), ADDR[0], ADDR[1]]);
        assert_eq!(local.0, "SLURM_LOCALID");
    }

    #[test]
    fn an_explicit_rank_must_be_below_the_world_size() {
        assert!(ProcessGroupConfig::new(1, 2, "127.0.0.1", 1).is_ok());
        assert!(ProcessGroupConfig::new(2, 2, "127.0.0.1", 1).is_err());
    }
}

//! The fault sweep: runs a program once on a healthy sim to count its failure points (each
//! allocation, launch, copy and event, each event hanging, the device lost at each tick), then
//! once per point with that one fault injected, and reports for each what the program saw:
//! a typed error or none, a panic, memory left in use after its handles dropped.

use super::harness::TestRuntime;
use crate::{Error, SimConfig};
use gpuworld_sim::{Fault, FaultPlan};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What one run with one injected fault gave.
#[derive(Debug)]
pub struct FaultOutcome {
    /// The fault injected.
    pub fault: Fault,
    /// The error the program returned, if any.
    pub error: Option<Error>,
    /// The panic's message, if the program or the runtime panicked.
    pub panic: Option<String>,
    /// Bytes still in use once the program returned (its handles dropped) and the runtime went
    /// idle; 0 when nothing leaked.
    pub leaked_bytes: u64,
}

/// Every failure point of a program and what each gave.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// One outcome per failure point, in the order [`gpuworld_sim::CallCounts::every_fault`] gives.
    pub outcomes: Vec<FaultOutcome>,
}

impl SweepReport {
    /// The outcomes that panicked.
    pub fn panics(&self) -> Vec<&FaultOutcome> {
        self.outcomes.iter().filter(|o| o.panic.is_some()).collect()
    }

    /// The outcomes that left memory in use.
    pub fn leaks(&self) -> Vec<&FaultOutcome> {
        self.outcomes
            .iter()
            .filter(|o| o.leaked_bytes > 0)
            .collect()
    }

    /// The outcomes whose program returned no error.
    pub fn unreported(&self) -> Vec<&FaultOutcome> {
        self.outcomes
            .iter()
            .filter(|o| o.error.is_none() && o.panic.is_none())
            .collect()
    }
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} failure points: {} reported an error, {} none, {} panicked, {} leaked",
            self.outcomes.len(),
            self.outcomes.iter().filter(|o| o.error.is_some()).count(),
            self.unreported().len(),
            self.panics().len(),
            self.leaks().len()
        )?;
        for outcome in &self.outcomes {
            let result = match (&outcome.panic, &outcome.error) {
                (Some(panic), _) => format!("PANIC {panic}"),
                (None, Some(error)) => format!("error: {error}"),
                (None, None) => "no error".to_string(),
            };
            let leak = if outcome.leaked_bytes > 0 {
                format!(" LEAKED {}B", outcome.leaked_bytes)
            } else {
                String::new()
            };
            writeln!(f, "  {}: {result}{leak}", outcome.fault)?;
        }
        Ok(())
    }
}

/// Runs `program` on a sim configured by `sim`, first without faults (it must succeed: its
/// error is returned), then once per failure point of that run with the fault injected.
pub fn fault_sweep(
    sim: SimConfig,
    program: impl Fn(&TestRuntime) -> Result<(), Error>,
) -> Result<SweepReport, Error> {
    let healthy = TestRuntime::with_sim(sim.clone());
    program(&healthy)?;
    let _ = healthy.step_until_idle();
    let points = healthy.sim(|sim| sim.call_counts()).every_fault();
    let outcomes = points
        .into_iter()
        .map(|fault| {
            let runtime = TestRuntime::with_sim(sim.clone().with_faults(FaultPlan::one(fault)));
            let run = catch_unwind(AssertUnwindSafe(|| {
                let result = program(&runtime);
                let _ = runtime.step_until_idle();
                result
            }));
            let (error, panic) = match run {
                Ok(result) => (result.err(), None),
                Err(payload) => (None, Some(panic_message(payload.as_ref()))),
            };
            let leaked_bytes = runtime.with_runtime(|rt| rt.memory_usage().bytes_in_use);
            FaultOutcome {
                fault,
                error,
                panic,
                leaked_bytes,
            }
        })
        .collect();
    Ok(SweepReport { outcomes })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

//! The fuzzer's reads: `read` and `read_one` of 1–3 random views checked at once, `read_async`
//! polled after every operation and settled (ticked until complete) at an operation drawn when it
//! was issued, and every read's bytes checked against the model.

use super::model::{Expected, View};
use super::session::{Fuzzer, SETTLE_LIMIT};
use crate::common::Pending;
use gpuworld::{Backend, Binding, Driver, HostBytes};
use std::time::{Duration, Instant};

/// Reads in flight at most; the oldest is settled before another is issued.
const READS_IN_FLIGHT: usize = 8;

/// A `read_async` in flight.
pub struct PendingRead {
    future: Pending<gpuworld::Result<Vec<HostBytes>>>,
    expected: Vec<Expected>,
    /// The slot of the stream it was issued on.
    slot: u64,
    /// The operation at which it must have completed.
    due: u64,
    /// The operation that issued it, for the report.
    issued: u64,
}

impl<B: Backend> Fuzzer<'_, B> {
    /// 1–3 random views of live handles, with what reads of them must return.
    fn random_sources(&mut self) -> (Vec<Binding>, Vec<Expected>, String) {
        let count = if self.rng.chance(700) {
            1
        } else {
            self.rng.between(2, 3) as usize
        };
        let mut bindings = Vec::new();
        let mut expected = Vec::new();
        let mut names = Vec::new();
        for _ in 0..count {
            let index = self.pick_handle();
            let view = self.random_view(self.handles[index].capacity() as usize);
            bindings.push(self.view_handle(index, view).binding());
            expected.push(self.model(index).expected(view));
            names.push(self.name(index, view));
        }
        (bindings, expected, names.join(", "))
    }

    pub fn read(&mut self) -> Result<(), String> {
        let (bindings, expected, names) = self.random_sources();
        let client = self.stream().clone();
        let got = if bindings.len() == 1 && self.rng.chance(500) {
            self.log(format!("read_one({names})"));
            client.read_one(bindings[0]).map(|bytes| vec![bytes])
        } else {
            self.log(format!("read([{names}])"));
            client.read(&bindings)
        };
        let got = got.map_err(|error| format!("a valid read failed: {error}"))?;
        self.check_all(&expected, &got)
    }

    pub fn read_async(&mut self) -> Result<(), String> {
        if self.reads.len() >= READS_IN_FLIGHT {
            self.settle_read(0)?;
        }
        let (bindings, expected, names) = self.random_sources();
        let due = self.op + self.rng.between(1, 40);
        self.log(format!("read_async([{names}]), settled by #{due}"));
        let future = Pending::new(self.stream().read_async(&bindings));
        self.reads.push(PendingRead {
            future,
            expected,
            slot: self.slot(self.current),
            due,
            issued: self.op,
        });
        Ok(())
    }

    /// Polls every read in flight once (checking those that completed) and settles the due ones.
    pub fn poll_reads(&mut self) -> Result<(), String> {
        let mut index = 0;
        while index < self.reads.len() {
            if let Some(result) = self.reads[index].future.poll() {
                let read = self.reads.remove(index);
                self.check_read(&read, result)?;
            } else if self.reads[index].due <= self.op {
                self.settle_read(index)?;
            } else {
                index += 1;
            }
        }
        Ok(())
    }

    /// Ticks until read `index` completes, then checks it.
    pub fn settle_read(&mut self, index: usize) -> Result<(), String> {
        let mut read = self.reads.remove(index);
        let result = self.wait_for(&mut read.future, "read_async")?;
        self.check_read(&read, result)
    }

    /// Settles every read in flight on `slot`, so that none of them can report a fault provoked
    /// after it was issued (a stream's fault goes to whichever of its reads completes next).
    pub fn settle_reads_on(&mut self, slot: u64) -> Result<(), String> {
        while let Some(index) = self.reads.iter().position(|read| read.slot == slot) {
            self.settle_read(index)?;
        }
        Ok(())
    }

    /// Ticks (as a host loop would) until `future` completes.
    fn wait_for<T>(&self, future: &mut Pending<T>, what: &str) -> Result<T, String> {
        let start = Instant::now();
        loop {
            if let Some(value) = future.poll() {
                return Ok(value);
            }
            if start.elapsed() > SETTLE_LIMIT {
                return Err(format!("{what} did not complete in {SETTLE_LIMIT:?}"));
            }
            self.client.tick();
            if self.client.driver() == Driver::DeviceThread {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Reads every live allocation whole on the current stream and checks it.
    pub fn read_everything(&mut self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for index in 0..self.handles.len() {
            let id = self.handles[index].id();
            if !seen.insert(id) {
                continue;
            }
            let model = self.model(index);
            let expected = model.expected(View::whole(model.len()));
            let after = self.op;
            let got = self
                .stream()
                .read_one(&self.handles[index])
                .map_err(|error| format!("reading {id} back after #{after} failed: {error}"))?;
            self.check_all(&[expected], &[got])
                .map_err(|error| format!("{id} read back after #{after}: {error}"))?;
        }
        Ok(())
    }

    fn check_read(
        &mut self,
        read: &PendingRead,
        result: gpuworld::Result<Vec<HostBytes>>,
    ) -> Result<(), String> {
        let got = result
            .map_err(|error| format!("the read_async of #{} failed: {error}", read.issued))?;
        self.check_all(&read.expected, &got)
            .map_err(|error| format!("the read_async of #{}: {error}", read.issued))
    }

    /// Checks each returned buffer against its expectation.
    pub fn check_all(&mut self, expected: &[Expected], got: &[HostBytes]) -> Result<(), String> {
        if expected.len() != got.len() {
            return Err(format!(
                "a read of {} bindings returned {} buffers",
                expected.len(),
                got.len()
            ));
        }
        for (i, (expected, got)) in expected.iter().zip(got).enumerate() {
            expected
                .check(got)
                .map_err(|error| format!("binding {i} of the read: {error}"))?;
            self.tally.bytes_compared += got.len() as u64;
        }
        self.tally.reads += 1;
        Ok(())
    }
}

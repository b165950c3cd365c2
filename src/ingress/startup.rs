//! The ingress cores' start-up handshake: every core sets itself up (its ring or event loop,
//! its eventfd: descriptors it needs before its first accept) and reports; none accepts until
//! all have reported, and `serve` reports ready only then.
//!
//! Without it a core accepted as soon as it was set up, while another was still creating its
//! ring: a connection flood at start (a provider retrying a backlog, a load balancer's checks)
//! could take the last free descriptors first, that core's `io_uring_setup` or `eventfd`
//! failed with EMFILE, and the whole server stopped (`ingress_core_failed`) right after
//! logging `ready`. Now no connection takes a descriptor before every core is set up; a core
//! that cannot set up (the descriptor limit itself too low) fails the start, before `ready`,
//! with its error. `serve` installs its signal handlers before this for the same reason.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

/// One core's side of the handshake: report the set-up once, with [`Startup::ready`] or
/// [`Startup::failed`]. Dropping it unreported (a panic during set-up) counts as a failure.
pub struct Startup {
    core: usize,
    reports: mpsc::Sender<(usize, Result<(), String>)>,
    decision: Arc<Decision>,
}

/// `serve`'s side: collects every core's report ([`StartupGate::wait`]) and tells them all
/// whether to serve. Dropped undecided, it tells them not to.
pub struct StartupGate {
    cores: usize,
    reports: mpsc::Receiver<(usize, Result<(), String>)>,
    decision: Arc<Decision>,
}

/// Whether the cores serve: `None` until `serve` has every report.
#[derive(Default)]
struct Decision {
    serve: Mutex<Option<bool>>,
    decided: Condvar,
}

impl Decision {
    fn set(&self, serve: bool) {
        let mut slot = self.serve.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(serve);
        }
        self.decided.notify_all();
    }

    fn wait(&self) -> bool {
        let slot = self.serve.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = self
            .decided
            .wait_while(slot, |s| s.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.unwrap_or(false)
    }
}

/// A gate for `cores` cores and their handles, one per core in core order.
pub fn gate(cores: usize) -> (StartupGate, Vec<Startup>) {
    let (tx, reports) = mpsc::channel();
    let decision = Arc::new(Decision::default());
    let handles = (0..cores)
        .map(|core| Startup { core, reports: tx.clone(), decision: Arc::clone(&decision) })
        .collect();
    (StartupGate { cores, reports, decision }, handles)
}

impl Startup {
    /// Reports this core set up and blocks until `serve` decides: after every core has
    /// reported, or at once if `serve` gave up (the gate dropped). Returns whether to serve:
    /// false when another core failed or `serve` gave up (this core then closes what it set
    /// up and ends).
    pub fn ready(self) -> bool {
        let _ = self.reports.send((self.core, Ok(())));
        drop(self.reports);
        self.decision.wait()
    }

    /// Reports that this core could not set itself up, with why (the core then returns the
    /// error itself and drops this handle).
    pub fn failed(&self, why: &std::io::Error) {
        let _ = self.reports.send((self.core, Err(why.to_string())));
    }
}

impl StartupGate {
    /// Waits until every core has reported, then lets them serve if all were set up.
    ///
    /// # Errors
    /// The first core that failed (or ended without reporting, e.g. a panic), with its
    /// reason; every core is then told not to serve.
    pub fn wait(self) -> Result<(), String> {
        let mut failure = None;
        for _ in 0..self.cores {
            match self.reports.recv() {
                Ok((_, Ok(()))) => {}
                Ok((core, Err(why))) => {
                    failure.get_or_insert(format!("ingress core {core} could not start: {why}"));
                }
                // Every handle is gone: the cores not heard from ended without a report.
                Err(mpsc::RecvError) => {
                    failure.get_or_insert_with(|| {
                        "an ingress core ended before it was set up".to_owned()
                    });
                    break;
                }
            }
        }
        self.decision.set(failure.is_none());
        failure.map_or(Ok(()), Err)
    }
}

impl Drop for StartupGate {
    fn drop(&mut self) {
        self.decision.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one thread per handle, each set up (`Ok`) or not (`Err`) as `set_up` says, and
    /// returns the gate's verdict with what each thread was told (`None`: it failed itself).
    fn run(set_up: &[Result<(), &str>]) -> (Result<(), String>, Vec<Option<bool>>) {
        let (gate, handles) = gate(set_up.len());
        let threads: Vec<_> = handles
            .into_iter()
            .zip(set_up.iter().map(|r| r.map_err(str::to_owned)))
            .map(|(startup, outcome)| {
                std::thread::spawn(move || match outcome {
                    Ok(()) => Some(startup.ready()),
                    Err(why) => {
                        startup.failed(&std::io::Error::other(why));
                        None
                    }
                })
            })
            .collect();
        let verdict = gate.wait();
        let told = threads.into_iter().map(|t| t.join().expect("core thread")).collect();
        (verdict, told)
    }

    #[test]
    fn every_core_serves_once_all_are_set_up() {
        let (verdict, told) = run(&[Ok(()), Ok(()), Ok(())]);
        assert_eq!(verdict, Ok(()));
        assert_eq!(told, vec![Some(true); 3]);
    }

    /// One core out of descriptors: the others, already set up, are told not to serve, and
    /// the start fails naming the core and its error.
    #[test]
    fn one_core_failing_stops_every_core_before_it_serves() {
        let (verdict, told) = run(&[Ok(()), Err("Too many open files (os error 24)"), Ok(())]);
        assert_eq!(
            verdict,
            Err("ingress core 1 could not start: Too many open files (os error 24)".to_owned())
        );
        assert_eq!(told, vec![Some(false), None, Some(false)]);
    }

    /// A core that ends without reporting (a panic during its set-up) fails the start instead
    /// of leaving `serve` and the other cores waiting forever.
    #[test]
    fn a_core_ending_unreported_fails_the_start() {
        let (gate, mut handles) = gate(2);
        let silent = handles.pop().expect("two handles");
        let waiting = handles.pop().expect("two handles");
        let core0 = std::thread::spawn(move || waiting.ready());
        std::thread::spawn(move || drop(silent)).join().expect("ends");
        assert_eq!(gate.wait(), Err("an ingress core ended before it was set up".to_owned()));
        assert!(!core0.join().expect("core 0"), "core 0 is told not to serve");
    }

    /// `serve` failing between spawning the cores and waiting for them (the gate dropped
    /// undecided) releases the cores already waiting, told not to serve.
    #[test]
    fn a_gate_dropped_undecided_releases_the_cores() {
        let (gate, mut handles) = gate(1);
        let startup = handles.pop().expect("one handle");
        let core = std::thread::spawn(move || startup.ready());
        drop(gate);
        assert!(!core.join().expect("core"), "the core is told not to serve");
    }
}

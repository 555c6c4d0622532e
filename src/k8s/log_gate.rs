//! One log line per failing dependency per backoff step. During an outage every reconcile of
//! every object fails with the same error (the API server unreachable), and every Event with
//! it; a line for each drowns the one thing a user needs to read. A failure whose error reads
//! like one already logged within the window is counted instead, and the next line for that
//! error says how many were folded into it. Errors that name their object (a conflict, a
//! refusal) read differently per object, so they still get a line each.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
    time::{Duration, Instant},
};

/// Folded failures per error text: when the last line for it was logged, and how many
/// failures have been folded since.
#[derive(Default)]
pub struct LogGate {
    seen: Mutex<HashMap<String, (Instant, u32)>>,
}

/// How many error texts are remembered at most (each a failing dependency, normally a few);
/// past that the oldest go, which only means one more line.
const REMEMBERED: usize = 256;

impl LogGate {
    /// Whether a failure with error text `key` at `now` gets a line: `Some(folded)` — the
    /// failures folded since the last line for it — or `None` when it is folded (a line for
    /// the same error was logged less than `window` ago).
    pub fn admit(&self, key: &str, window: Duration, now: Instant) -> Option<u32> {
        let mut seen = self.seen.lock().expect("not poisoned");
        match seen.get_mut(key) {
            Some((last, folded)) if now.duration_since(*last) < window => {
                *folded += 1;
                None
            }
            Some((last, folded)) => {
                let n = *folded;
                *last = now;
                *folded = 0;
                Some(n)
            }
            None => {
                if seen.len() >= REMEMBERED
                    && let Some(oldest) = seen
                        .iter()
                        .min_by_key(|(_, (at, _))| *at)
                        .map(|(k, _)| k.clone())
                {
                    seen.remove(&oldest);
                }
                seen.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The part of an error text that names the failing dependency: controllers' errors say what
/// they were doing first ("patching Rollout ns/vllm: … : Connection refused (os error 111)"),
/// and the cause comes last, the same for every object.
pub fn cause(text: &str) -> &str {
    text.rsplit(": ").next().unwrap_or(text)
}

/// The process's gate: one dependency failing is one dependency for every controller.
pub static GATE: LazyLock<LogGate> = LazyLock::new(LogGate::default);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_error_gets_one_line_per_window_and_the_next_counts_the_rest() {
        let gate = LogGate::default();
        let t0 = Instant::now();
        let w = Duration::from_secs(2);
        let refused = "error trying to connect: tcp connect error: Connection refused";
        assert_eq!(gate.admit(refused, w, t0), Some(0));
        for i in 1..=40 {
            assert_eq!(
                gate.admit(refused, w, t0 + Duration::from_millis(i * 10)),
                None
            );
        }
        // Another error is another dependency (or names its object): its own line.
        assert_eq!(gate.admit("Conflict on vllm-0", w, t0), Some(0));
        assert_eq!(gate.admit("Conflict on vllm-1", w, t0), Some(0));
        // The next backoff step: one line, saying how many were folded into it.
        assert_eq!(gate.admit(refused, w, t0 + w), Some(40));
        assert_eq!(
            gate.admit(refused, w, t0 + w + Duration::from_millis(1)),
            None
        );
        assert_eq!(gate.admit(refused, w, t0 + w * 3), Some(1));
    }

    #[test]
    fn the_cause_is_what_every_object_shares() {
        let a = "patching Rollout ns/a: HyperError: client error (Connect): tcp connect error: Connection refused (os error 111)";
        let b = "creating StatefulSet ns/b-0: HyperError: client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(cause(a), cause(b));
        assert_eq!(cause(a), "Connection refused (os error 111)");
        assert_eq!(cause("plain"), "plain");
    }

    #[test]
    fn at_most_a_bounded_number_of_error_texts_is_remembered() {
        let gate = LogGate::default();
        let t0 = Instant::now();
        for i in 0..(REMEMBERED + 10) {
            let at = t0 + Duration::from_millis(i as u64);
            assert_eq!(
                gate.admit(&format!("e{i}"), Duration::from_secs(60), at),
                Some(0)
            );
        }
        assert!(gate.seen.lock().unwrap().len() <= REMEMBERED);
    }
}

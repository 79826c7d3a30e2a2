//! What a handler receives besides its params: who it runs for, when it must
//! stop, and where its log lines go.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

/// Why a handler is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The attempt ran past `timeoutMs`.
    Timeout,
    /// The process is shutting down.
    Shutdown,
    /// The non-concurrency lock could not be renewed.
    LockLost,
    /// Someone cancelled the run (or a newer fire replaced it).
    Cancelled,
}

/// The sending half: the executor stops a handler with it.
#[derive(Debug, Clone)]
pub struct Stopper(Arc<watch::Sender<Option<StopReason>>>);

/// The receiving half a handler awaits or polls.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<Option<StopReason>>);

/// A connected stopper and signal.
pub fn stop_pair() -> (Stopper, StopSignal) {
    let (tx, rx) = watch::channel(None);
    (Stopper(Arc::new(tx)), StopSignal(rx))
}

impl Stopper {
    /// Tells the handler to stop; the first reason given wins.
    pub fn stop(&self, reason: StopReason) {
        self.0.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }

    pub fn reason(&self) -> Option<StopReason> {
        *self.0.borrow()
    }
}

impl StopSignal {
    /// Resolves when the handler must stop.
    pub async fn stopped(&mut self) -> StopReason {
        match self.0.wait_for(Option::is_some).await {
            Ok(reason) => reason.unwrap_or(StopReason::Shutdown),
            // The executor is gone: nobody waits for the result any more.
            Err(_) => StopReason::Shutdown,
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.0.borrow().is_some()
    }
}

/// Resolves once the process-wide shutdown flag turns true (or its sender
/// is gone). The borrow of the flag ends here, so callers may hold the
/// future across threads.
pub async fn shutting_down(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await;
}

/// Most characters of a run's `output` (SPEC §6).
pub const MAX_OUTPUT_CHARS: usize = 16_000;
/// Most characters of a run's `error` (SPEC §6).
pub const MAX_ERROR_CHARS: usize = 4_000;

/// Collects the lines a handler writes; they become the run's `output`.
#[derive(Debug, Clone, Default)]
pub struct LogSink(Arc<Mutex<String>>);

impl LogSink {
    /// Appends one line. Text past the output limit is dropped here already,
    /// so a chatty handler cannot grow memory without bound.
    pub fn line(&self, text: impl AsRef<str>) {
        let Ok(mut buf) = self.0.lock() else { return };
        if buf.chars().count() >= MAX_OUTPUT_CHARS {
            return;
        }
        buf.push_str(text.as_ref());
        buf.push('\n');
    }

    pub fn contents(&self) -> String {
        self.0.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// Cuts `text` to at most `max` characters, on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_string(),
        None => text.to_string(),
    }
}

/// The log lines followed by the return value, cut to the output limit.
pub fn output_of(log: &str, value: &str) -> String {
    let mut out = String::with_capacity(log.len() + value.len());
    out.push_str(log);
    out.push_str(value);
    cut(&out, MAX_OUTPUT_CHARS)
}

/// Everything about the attempt a handler runs in.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub job_id: i64,
    pub job_name: String,
    pub fire_id: i64,
    pub attempt: u32,
    /// When the attempt times out; `None` for no limit.
    pub deadline: Option<DateTime<Utc>>,
    pub stop: StopSignal,
    pub log: LogSink,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_on_char_boundaries() {
        let cases = [
            ("", 3, ""),
            ("abc", 3, "abc"),
            ("abcd", 3, "abc"),
            ("汉字汉字", 3, "汉字汉"),
            ("a😀b", 2, "a😀"),
        ];
        for (text, max, want) in cases {
            assert_eq!(cut(text, max), want, "{text}");
        }
    }

    #[test]
    fn log_lines_and_value_form_the_output() {
        let log = LogSink::default();
        log.line("step 1");
        log.line("step 2");
        assert_eq!(output_of(&log.contents(), "done"), "step 1\nstep 2\ndone");
        let big = LogSink::default();
        for _ in 0..10_000 {
            big.line("0123456789");
        }
        assert_eq!(
            output_of(&big.contents(), "end").chars().count(),
            MAX_OUTPUT_CHARS
        );
    }

    #[tokio::test]
    async fn first_stop_reason_wins() {
        let (stopper, mut signal) = stop_pair();
        assert!(!signal.is_stopped());
        stopper.stop(StopReason::Timeout);
        stopper.stop(StopReason::Shutdown);
        assert_eq!(signal.stopped().await, StopReason::Timeout);
        assert_eq!(stopper.reason(), Some(StopReason::Timeout));
    }
}

//! Helpers for the worker's unit tests: a fresh migrated SQLite store, a
//! clock the test moves by hand, and a run context with its stopper.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Duration, Utc};
use qiwu_storage::Store;

use crate::clock::Clock;
use crate::context::{LogSink, RunContext, Stopper, stop_pair};

/// A migrated SQLite store in its own directory, removed on drop.
pub struct TestStore {
    pub store: Store,
    dir: PathBuf,
}

impl TestStore {
    /// The database file's URL, for a second connection of a test's own.
    pub fn url(&self) -> String {
        format!("sqlite://{}", self.dir.join("qiwu.db").display())
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl std::ops::Deref for TestStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

pub async fn test_store() -> TestStore {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "qiwu-worker-{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        Utc::now().timestamp_nanos_opt().unwrap_or(0)
    ));
    let url = format!("sqlite://{}", dir.join("qiwu.db").display());
    let store = Store::connect(&url).await.expect("open sqlite");
    store.migrate().await.expect("migrate");
    TestStore { store, dir }
}

/// A clock that only moves when told.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn at(t: DateTime<Utc>) -> ManualClock {
        ManualClock(Mutex::new(t))
    }

    pub fn advance(&self, by: Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += by;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.0.lock().map(|t| *t).unwrap_or_else(|_| Utc::now())
    }
}

/// A context for one attempt, and the stopper that ends it.
pub fn run_context() -> (Stopper, RunContext) {
    let (stopper, stop) = stop_pair();
    (
        stopper,
        RunContext {
            job_id: 1,
            job_name: "test".into(),
            fire_id: 1,
            attempt: 1,
            deadline: None,
            stop,
            log: LogSink::default(),
        },
    )
}

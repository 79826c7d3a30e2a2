//! What every request handler shares.

use std::sync::Arc;

use chrono_tz::Tz;
use qiwu_domain::HandlerCatalog;
use qiwu_storage::Store;

use crate::jwt::JwtKeys;

/// Told after a change is committed, so timers everywhere re-arm and
/// queued fires start without waiting for the next reconciliation.
pub trait ChangeListener: Send + Sync {
    fn job_changed(&self, job_id: i64);
    fn fire_queued(&self, fire_id: i64);
    /// A cancel request for this run was stored.
    fn run_cancel_requested(&self, run_id: i64);
    /// A freeze window was created, edited or deleted.
    fn freezes_changed(&self, freeze_id: i64);
}

/// A listener for processes that run no timers.
pub struct NoListener;

impl ChangeListener for NoListener {
    fn job_changed(&self, _job_id: i64) {}
    fn fire_queued(&self, _fire_id: i64) {}
    fn run_cancel_requested(&self, _run_id: i64) {}
    fn freezes_changed(&self, _freeze_id: i64) {}
}

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub catalog: Arc<HandlerCatalog>,
    pub keys: JwtKeys,
    /// `QIWU_TIMEZONE`: the zone of jobs whose own zone is null.
    pub timezone: Tz,
    pub changes: Arc<dyn ChangeListener>,
    /// `QIWU_MAX_PENDING_RUN_ONCE`: most queued "run once" fires per job.
    pub max_pending_run_once: u64,
}

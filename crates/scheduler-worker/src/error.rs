//! The worker crate's error type.

use qiwu_storage::StorageError;

/// What can stop the engine or one of its steps.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("storage failed")]
    Storage(#[from] StorageError),
    #[error("job {job_id} has an invalid stored schedule: {reason}")]
    InvalidStoredJob { job_id: i64, reason: String },
    #[error("cannot seed built-in job {key}: {reason}")]
    Seed { key: String, reason: String },
    #[error("cannot build the HTTP client for handlers in other services: {0}")]
    HttpClient(String),
    #[error(
        "QIWU_TIMEZONE={mine} differs from the cluster's zone {cluster}: every instance must use the same zone, or fire times would differ between instances"
    )]
    ZoneMismatch { mine: String, cluster: String },
}

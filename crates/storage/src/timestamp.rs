//! Conversion between `DateTime<Utc>` and the `BIGINT` milliseconds since the
//! Unix epoch that every timestamp column stores.

use chrono::{DateTime, Utc};

use crate::StorageError;

/// Milliseconds since the Unix epoch; sub-millisecond precision is dropped.
pub fn to_millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// The instant a stored value denotes; values outside chrono's range mean the
/// row was not written by us.
pub fn from_millis(ms: i64) -> Result<DateTime<Utc>, StorageError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StorageError::Corrupt(format!("timestamp {ms} ms is out of range")))
}

/// `t` cut to whole milliseconds, i.e. what a round trip through the database gives.
pub fn truncate_to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_drops_sub_millisecond_part() {
        let t = DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap();
        let ms = to_millis(t);
        assert_eq!(ms, 1_700_000_000_123);
        assert_eq!(from_millis(ms).unwrap(), truncate_to_millis(t));
    }

    #[test]
    fn before_epoch_and_far_future() {
        let t = DateTime::from_timestamp_millis(-86_400_000).unwrap();
        assert_eq!(from_millis(to_millis(t)).unwrap(), t);
        // MySQL TIMESTAMP would stop at 2038; BIGINT ms does not.
        let t = DateTime::from_timestamp(4_102_444_800, 0).unwrap();
        assert_eq!(from_millis(to_millis(t)).unwrap(), t);
    }

    #[test]
    fn out_of_range_is_corrupt() {
        assert!(matches!(
            from_millis(i64::MAX),
            Err(StorageError::Corrupt(_))
        ));
    }
}

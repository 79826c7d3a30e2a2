//! What the run log says of a run: how it ended (`RunStatus`) and what
//! caused its fire (`Trigger`), each with its stored text.

/// A run's status in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Running,
    Success,
    Failed,
    Skipped,
    Timeout,
    /// Stopped by a person or service (or replaced by a newer fire).
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Failed => "failed",
            RunStatus::Skipped => "skipped",
            RunStatus::Timeout => "timeout",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "running" => RunStatus::Running,
            "success" => RunStatus::Success,
            "failed" => RunStatus::Failed,
            "skipped" => RunStatus::Skipped,
            "timeout" => RunStatus::Timeout,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }
}

/// What caused a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    Schedule,
    Manual,
    Misfire,
    /// A missed time fired by a backfill request.
    Backfill,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Misfire => "misfire",
            Trigger::Backfill => "backfill",
        }
    }

    pub fn parse(text: &str) -> Option<Trigger> {
        Some(match text {
            "schedule" => Trigger::Schedule,
            "manual" => Trigger::Manual,
            "misfire" => Trigger::Misfire,
            "backfill" => Trigger::Backfill,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_round_trip() {
        for s in [
            "running",
            "success",
            "failed",
            "skipped",
            "timeout",
            "cancelled",
        ] {
            assert_eq!(RunStatus::parse(s).map(RunStatus::as_str), Some(s));
        }
        for t in ["schedule", "manual", "misfire", "backfill"] {
            assert_eq!(Trigger::parse(t).map(Trigger::as_str), Some(t));
        }
        assert_eq!(RunStatus::parse("done"), None);
        assert_eq!(Trigger::parse("Schedule"), None);
    }
}

//! Pausing a job (issue 10 part 3): the rules of a request to enable or
//! disable a job with a reason and an end, and whether it changes a job.
//!
//! A pause is a disabled job with a note: who paused it and when, an
//! optional reason, and an optional end at which the cluster enables the
//! job again. Time is a parameter, as everywhere in this crate.

use chrono::{DateTime, Utc};

use crate::Lang;

/// Longest pause reason, in characters (the column holds 500).
pub const MAX_REASON_CHARS: usize = 500;

/// A checked request: the flag, and for a pause its reason and end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRequest {
    pub enabled: bool,
    /// Blank reasons are read as none.
    pub reason: Option<String>,
    pub until: Option<DateTime<Utc>>,
}

/// What is wrong with one field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseProblem {
    /// `reason` or `until` sent with `enabled: true`.
    OnlyWhenDisabling,
    ReasonTooLong {
        chars: usize,
    },
    ControlCharacter,
    /// `until` is not after now.
    UntilNotFuture,
}

/// One field's problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseError {
    pub field: &'static str,
    pub problem: PauseProblem,
}

impl PauseError {
    pub fn message(&self, lang: Lang) -> String {
        let field = self.field;
        match (&self.problem, lang) {
            (PauseProblem::OnlyWhenDisabling, Lang::Zh) => {
                format!("{field} 只能在停用（enabled 为 false）时填写")
            }
            (PauseProblem::OnlyWhenDisabling, Lang::En) => {
                format!("{field} is only accepted with enabled: false")
            }
            (PauseProblem::ReasonTooLong { chars }, Lang::Zh) => {
                format!("{field} 最多 {MAX_REASON_CHARS} 个字，现在是 {chars} 个")
            }
            (PauseProblem::ReasonTooLong { chars }, Lang::En) => {
                format!("{field} has at most {MAX_REASON_CHARS} characters, got {chars}")
            }
            (PauseProblem::ControlCharacter, Lang::Zh) => {
                format!("{field} 不能包含控制字符（换行、制表符等 U+0000–U+001F、U+007F）")
            }
            (PauseProblem::ControlCharacter, Lang::En) => format!(
                "{field} must not contain control characters (line breaks, tabs and the rest of U+0000–U+001F, U+007F)"
            ),
            (PauseProblem::UntilNotFuture, Lang::Zh) => {
                format!("{field} 必须是将来的时间")
            }
            (PauseProblem::UntilNotFuture, Lang::En) => {
                format!("{field} must be in the future")
            }
        }
    }
}

/// Checks a request at `now`: `reason` and `until` only with
/// `enabled: false`, a reason of at most [`MAX_REASON_CHARS`] characters
/// without control characters, `until` after `now`. Every problem is
/// reported.
pub fn validate(
    enabled: bool,
    reason: Option<&str>,
    until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<PauseRequest, Vec<PauseError>> {
    let mut errors = Vec::new();
    let mut fail = |field, problem| errors.push(PauseError { field, problem });
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if enabled && reason.is_some() {
        fail("reason", PauseProblem::OnlyWhenDisabling);
    }
    if enabled && until.is_some() {
        fail("until", PauseProblem::OnlyWhenDisabling);
    }
    if let Some(text) = reason {
        let chars = text.chars().count();
        if chars > MAX_REASON_CHARS {
            fail("reason", PauseProblem::ReasonTooLong { chars });
        }
        if crate::job::has_control(text) {
            fail("reason", PauseProblem::ControlCharacter);
        }
    }
    if !enabled && until.is_some_and(|t| t <= now) {
        fail("until", PauseProblem::UntilNotFuture);
    }
    if errors.is_empty() {
        Ok(PauseRequest {
            enabled,
            reason: reason.map(str::to_owned),
            until,
        })
    } else {
        Err(errors)
    }
}

impl PauseRequest {
    /// True when the request writes a job that is `enabled` now: a change
    /// of the flag, or a disabled job paused again with a reason or an
    /// end (which replace the pause it had). A bare request for the state
    /// the job already has changes nothing.
    pub fn changes(&self, enabled: bool) -> bool {
        self.enabled != enabled
            || (!self.enabled && (self.reason.is_some() || self.until.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    /// (enabled, reason, until in s from now, the request's reason and
    /// until or each field's problem)
    type Case<'a> = (bool, Option<&'a str>, Option<i64>, Expected<'a>);
    type Expected<'a> = Result<(Option<&'a str>, Option<i64>), Vec<(&'static str, PauseProblem)>>;

    #[test]
    fn validation_table() {
        let long = "停".repeat(501);
        let max = "停".repeat(500);
        let cases: Vec<Case> = vec![
            (false, None, None, Ok((None, None))),
            (true, None, None, Ok((None, None))),
            (false, Some("发版"), Some(60), Ok((Some("发版"), Some(60)))),
            (false, Some("  发版 "), None, Ok((Some("发版"), None))),
            (false, Some("   "), None, Ok((None, None))),
            (true, Some(""), None, Ok((None, None))),
            (false, Some(&max), None, Ok((Some(&max), None))),
            (
                false,
                Some(&long),
                None,
                Err(vec![("reason", PauseProblem::ReasonTooLong { chars: 501 })]),
            ),
            (
                false,
                Some("a\u{0}b"),
                None,
                Err(vec![("reason", PauseProblem::ControlCharacter)]),
            ),
            (
                false,
                None,
                Some(0),
                Err(vec![("until", PauseProblem::UntilNotFuture)]),
            ),
            (
                false,
                None,
                Some(-5),
                Err(vec![("until", PauseProblem::UntilNotFuture)]),
            ),
            (false, None, Some(1), Ok((None, Some(1)))),
            (
                true,
                None,
                Some(60),
                Err(vec![("until", PauseProblem::OnlyWhenDisabling)]),
            ),
            // Enabling with both: both named; the past `until` is not
            // reported again, the field is wrong either way.
            (
                true,
                Some("x"),
                Some(-5),
                Err(vec![
                    ("reason", PauseProblem::OnlyWhenDisabling),
                    ("until", PauseProblem::OnlyWhenDisabling),
                ]),
            ),
        ];
        for (enabled, reason, until, expected) in cases {
            let got = validate(enabled, reason, until.map(at), at(0));
            let expected = expected
                .map(|(r, u)| PauseRequest {
                    enabled,
                    reason: r.map(str::to_owned),
                    until: u.map(at),
                })
                .map_err(|errors| {
                    errors
                        .into_iter()
                        .map(|(field, problem)| PauseError { field, problem })
                        .collect::<Vec<_>>()
                });
            assert_eq!(got, expected, "{enabled} {reason:?} {until:?}");
        }
    }

    #[test]
    fn what_changes_a_job() {
        let req = |enabled, reason: Option<&str>, until: Option<i64>| PauseRequest {
            enabled,
            reason: reason.map(str::to_owned),
            until: until.map(at),
        };
        // (request, the job's enabled now, writes)
        let cases = [
            (req(true, None, None), true, false),
            (req(true, None, None), false, true),
            (req(false, None, None), true, true),
            (req(false, None, None), false, false),
            (req(false, Some("r"), None), false, true),
            (req(false, None, Some(5)), false, true),
            (req(false, Some("r"), Some(5)), true, true),
        ];
        for (request, enabled, writes) in cases {
            assert_eq!(request.changes(enabled), writes, "{request:?} on {enabled}");
        }
    }

    #[test]
    fn messages_name_the_field_in_both_languages() {
        for problem in [
            PauseProblem::OnlyWhenDisabling,
            PauseProblem::ReasonTooLong { chars: 501 },
            PauseProblem::ControlCharacter,
            PauseProblem::UntilNotFuture,
        ] {
            let e = PauseError {
                field: "until",
                problem,
            };
            for lang in [Lang::Zh, Lang::En] {
                assert!(e.message(lang).contains("until"), "{e:?} {lang:?}");
            }
            assert_ne!(e.message(Lang::Zh), e.message(Lang::En));
        }
    }
}

//! Reading query-string values that arrive as text, so that every bad value
//! is answered with a 400 naming its parameter (serde's own errors do not).

use chrono::{DateTime, Utc};
use qiwu_domain::Lang;

use crate::error::ApiError;

/// Default and largest page of the cursor-paged lists.
pub const DEFAULT_LIMIT: u64 = 20;
pub const MAX_LIMIT: u64 = 100;

/// The value with surrounding blanks removed; a blank value means absent
/// (a form's empty field).
pub fn text(value: Option<String>) -> Option<String> {
    value.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// `limit`: 1–100, default 20.
pub fn limit(lang: Lang, value: Option<String>) -> Result<u64, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(DEFAULT_LIMIT);
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(ApiError::field(
            lang,
            "limit",
            format!("limit 应为 1–{MAX_LIMIT} 的整数"),
            format!("limit must be a whole number from 1 to {MAX_LIMIT}"),
        )),
    }
}

/// A positive id such as `jobId`.
pub fn id(lang: Lang, field: &str, value: Option<String>) -> Result<Option<i64>, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(None);
    };
    match raw.parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(ApiError::field(
            lang,
            field,
            format!("{field} 应为正整数"),
            format!("{field} must be a positive whole number"),
        )),
    }
}

/// `true` or `false`.
pub fn boolean(lang: Lang, field: &str, value: Option<String>) -> Result<Option<bool>, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(None);
    };
    match raw.as_str() {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        _ => Err(ApiError::field(
            lang,
            field,
            format!("{field} 只能是 true 或 false"),
            format!("{field} must be true or false"),
        )),
    }
}

/// An RFC 3339 instant with its offset, such as `2025-11-25T08:00:00+08:00`.
pub fn instant(
    lang: Lang,
    field: &str,
    value: Option<String>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(None);
    };
    // An unencoded `+08:00` in a URL arrives as ` 08:00` (a `+` in a query
    // string means a space); read it the way it was meant.
    let parsed = DateTime::parse_from_rfc3339(&raw)
        .or_else(|e| DateTime::parse_from_rfc3339(&raw.replace(' ', "+")).map_err(|_| e));
    match parsed {
        Ok(t) => Ok(Some(t.with_timezone(&Utc))),
        Err(_) => Err(ApiError::field(
            lang,
            field,
            format!("{field} 应为带时区的 RFC 3339 时间，例如 2025-11-25T08:00:00+08:00"),
            format!(
                "{field} must be an RFC 3339 time with an offset, such as 2025-11-25T08:00:00+08:00"
            ),
        )),
    }
}

/// A range whose start is after its end matches nothing: say so instead.
pub fn range(
    lang: Lang,
    to_field: &str,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> Result<(), ApiError> {
    match (from, to) {
        (Some(f), Some(t)) if f > t => Err(ApiError::field(
            lang,
            to_field,
            format!("{to_field} 不能早于开始时间"),
            format!("{to_field} cannot be before the start of the range"),
        )),
        _ => Ok(()),
    }
}

/// One of `allowed`, exactly.
pub fn one_of(
    lang: Lang,
    field: &str,
    value: Option<String>,
    allowed: &[&str],
) -> Result<Option<String>, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(None);
    };
    if allowed.contains(&raw.as_str()) {
        Ok(Some(raw))
    } else {
        let list = allowed.join(", ");
        Err(ApiError::field(
            lang,
            field,
            format!("{field} 只能是以下之一：{list}"),
            format!("{field} must be one of: {list}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(limit(Lang::Zh, None).unwrap(), 20);
        assert_eq!(limit(Lang::Zh, Some(" ".into())).unwrap(), 20);
        assert_eq!(limit(Lang::Zh, Some("1".into())).unwrap(), 1);
        assert_eq!(limit(Lang::Zh, Some("100".into())).unwrap(), 100);
        for bad in ["0", "101", "-1", "abc", "1.5", "99999999999999999999999"] {
            assert!(limit(Lang::Zh, Some(bad.into())).is_err(), "{bad}");
        }
    }

    #[test]
    fn instants() {
        let t = instant(Lang::En, "from", Some("2025-11-25T08:00:00+08:00".into()))
            .unwrap()
            .unwrap();
        assert_eq!(t.to_rfc3339(), "2025-11-25T00:00:00+00:00");
        // The same, after a query string turned `+` into a space.
        let spaced = instant(Lang::En, "from", Some("2025-11-25T08:00:00 08:00".into()))
            .unwrap()
            .unwrap();
        assert_eq!(spaced, t);
        assert_eq!(instant(Lang::En, "from", Some("".into())).unwrap(), None);
        for bad in [
            "yesterday",
            "2025-11-25",
            "2025-11-25T08:00:00",
            "2025-13-01T00:00:00Z",
        ] {
            let err = instant(Lang::En, "startedFrom", Some(bad.into())).unwrap_err();
            assert_eq!(err.problem().errors[0].field, "startedFrom", "{bad}");
        }
    }

    #[test]
    fn ids_booleans_and_choices() {
        assert_eq!(id(Lang::Zh, "jobId", Some("42".into())).unwrap(), Some(42));
        assert!(id(Lang::Zh, "jobId", Some("0".into())).is_err());
        assert!(id(Lang::Zh, "jobId", Some("x".into())).is_err());
        assert_eq!(
            boolean(Lang::Zh, "enabled", Some("false".into())).unwrap(),
            Some(false)
        );
        assert!(boolean(Lang::Zh, "enabled", Some("maybe".into())).is_err());
        let allowed = ["a", "b"];
        assert_eq!(
            one_of(Lang::Zh, "s", Some("b".into()), &allowed).unwrap(),
            Some("b".into())
        );
        assert!(one_of(Lang::Zh, "s", Some("B".into()), &allowed).is_err());
    }
}

//! Reading query-string values that arrive as text, so that every bad value
//! is answered with a 400 naming its parameter (serde's own errors do not).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};

use crate::error::{ApiError, ErrorKind, ProblemFieldText, Text};

/// The largest integer a JSON number carries exactly (2^53 − 1): ids,
/// versions and pages stay within it, so JavaScript clients read them
/// right.
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// A resource id in a path: a whole number from 1 to [`MAX_SAFE_INTEGER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Id(pub i64);

impl Id {
    /// The id `text` spells, if it is one.
    pub fn parse(text: &str) -> Option<i64> {
        text.parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_SAFE_INTEGER).contains(n))
    }

    /// The 404 for a path segment `field` that cannot be an id: nothing
    /// lives at such a path, and the answer says what an id is.
    pub fn path_error(field: &str) -> ApiError {
        ApiError::new(ErrorKind::NoSuchPath(ProblemFieldText::new(
            field,
            Text::new(
                format!("不存在：路径里的 {field} 应为 1–{MAX_SAFE_INTEGER} 的整数"),
                format!(
                    "Not found: {field} in the path is a whole number from 1 to {MAX_SAFE_INTEGER}"
                ),
            ),
        )))
    }

    /// The 400 for a value of `field` that is not an id.
    pub fn error(field: &str) -> ApiError {
        ApiError::field(
            field,
            format!("{field} 应为 1–{MAX_SAFE_INTEGER} 的整数"),
            format!("{field} must be a whole number from 1 to {MAX_SAFE_INTEGER}"),
        )
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        // Path segments arrive as text.
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Id::parse(&text)
            .map(Id)
            .ok_or_else(|| serde::de::Error::custom("not an id"))
    }
}

/// Default and largest page of the cursor-paged lists.
pub const DEFAULT_LIMIT: u64 = 20;
pub const MAX_LIMIT: u64 = 100;

/// The value with surrounding blanks removed; a blank value means absent
/// (a form's empty field).
pub fn text(value: Option<String>) -> Option<String> {
    value.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// `limit`: 1–100, default 20.
pub fn limit(value: Option<String>) -> Result<u64, ApiError> {
    page_size("limit", value)
}

/// An id such as `jobId`: 1 to [`MAX_SAFE_INTEGER`].
pub fn id(field: &str, value: Option<String>) -> Result<Option<i64>, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(None);
    };
    Id::parse(&raw).map(Some).ok_or_else(|| Id::error(field))
}

/// `page`: 1 to [`MAX_SAFE_INTEGER`], default 1.
pub fn page(value: Option<String>) -> Result<u64, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(1);
    };
    match raw.parse::<i64>() {
        Ok(n) if (1..=MAX_SAFE_INTEGER).contains(&n) => Ok(n as u64),
        _ => Err(ApiError::field(
            "page",
            format!("page 从 1 开始，应为 1–{MAX_SAFE_INTEGER} 的整数"),
            format!("page starts at 1: a whole number from 1 to {MAX_SAFE_INTEGER}"),
        )),
    }
}

/// A page size such as `pageSize`: 1 to [`MAX_LIMIT`], default
/// [`DEFAULT_LIMIT`].
pub fn page_size(field: &str, value: Option<String>) -> Result<u64, ApiError> {
    let Some(raw) = text(value) else {
        return Ok(DEFAULT_LIMIT);
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(ApiError::field(
            field,
            format!("{field} 应为 1–{MAX_LIMIT} 的整数"),
            format!("{field} must be a whole number from 1 to {MAX_LIMIT}"),
        )),
    }
}

/// `true` or `false`; an empty value (a form's empty field) means absent,
/// but blanks alone are not a boolean.
pub fn boolean(field: &str, value: Option<String>) -> Result<Option<bool>, ApiError> {
    let Some(raw) = value.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    match raw.trim() {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        _ => Err(ApiError::field(
            field,
            format!("{field} 只能是 true 或 false"),
            format!("{field} must be true or false"),
        )),
    }
}

/// An RFC 3339 instant with its offset, such as `2025-11-25T08:00:00+08:00`.
pub fn instant(field: &str, value: Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
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
    to_field: &str,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> Result<(), ApiError> {
    match (from, to) {
        (Some(f), Some(t)) if f > t => Err(ApiError::field(
            to_field,
            format!("{to_field} 不能早于开始时间"),
            format!("{to_field} cannot be before the start of the range"),
        )),
        _ => Ok(()),
    }
}

/// One of `allowed`, exactly.
pub fn one_of(
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
            field,
            format!("{field} 只能是以下之一：{list}"),
            format!("{field} must be one of: {list}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qiwu_domain::Lang;

    #[test]
    fn limits() {
        assert_eq!(limit(None).unwrap(), 20);
        assert_eq!(limit(Some(" ".into())).unwrap(), 20);
        assert_eq!(limit(Some("1".into())).unwrap(), 1);
        assert_eq!(limit(Some("100".into())).unwrap(), 100);
        for bad in ["0", "101", "-1", "abc", "1.5", "99999999999999999999999"] {
            assert!(limit(Some(bad.into())).is_err(), "{bad}");
        }
    }

    #[test]
    fn instants() {
        let t = instant("from", Some("2025-11-25T08:00:00+08:00".into()))
            .unwrap()
            .unwrap();
        assert_eq!(t.to_rfc3339(), "2025-11-25T00:00:00+00:00");
        // The same, after a query string turned `+` into a space.
        let spaced = instant("from", Some("2025-11-25T08:00:00 08:00".into()))
            .unwrap()
            .unwrap();
        assert_eq!(spaced, t);
        assert_eq!(instant("from", Some("".into())).unwrap(), None);
        for bad in [
            "yesterday",
            "2025-11-25",
            "2025-11-25T08:00:00",
            "2025-13-01T00:00:00Z",
        ] {
            let err = instant("startedFrom", Some(bad.into())).unwrap_err();
            assert_eq!(
                err.problem(Lang::Zh).errors[0].field,
                "startedFrom",
                "{bad}"
            );
        }
    }

    #[test]
    fn ids_booleans_and_choices() {
        assert_eq!(id("jobId", Some("42".into())).unwrap(), Some(42));
        assert!(id("jobId", Some("0".into())).is_err());
        assert!(id("jobId", Some("x".into())).is_err());
        assert_eq!(
            id("jobId", Some("9007199254740991".into())).unwrap(),
            Some(MAX_SAFE_INTEGER)
        );
        assert!(id("jobId", Some("9007199254740992".into())).is_err());
        assert_eq!(page(None).unwrap(), 1);
        assert_eq!(
            page(Some("9007199254740991".into())).unwrap(),
            9_007_199_254_740_991
        );
        for bad in ["0", "-1", "abc", "18446744073709551615", "9007199254740992"] {
            let err = page(Some(bad.into())).unwrap_err();
            assert_eq!(err.problem(Lang::Zh).errors[0].field, "page", "{bad}");
        }
        assert_eq!(page_size("pageSize", Some("100".into())).unwrap(), 100);
        let err = page_size("pageSize", Some("101".into())).unwrap_err();
        assert_eq!(err.problem(Lang::Zh).errors[0].field, "pageSize");
        assert_eq!(
            boolean("enabled", Some("false".into())).unwrap(),
            Some(false)
        );
        assert!(boolean("enabled", Some("maybe".into())).is_err());
        assert!(boolean("enabled", Some("\n".into())).is_err());
        assert_eq!(boolean("enabled", Some(String::new())).unwrap(), None);
        let allowed = ["a", "b"];
        assert_eq!(
            one_of("s", Some("b".into()), &allowed).unwrap(),
            Some("b".into())
        );
        assert!(one_of("s", Some("B".into()), &allowed).is_err());
    }
}

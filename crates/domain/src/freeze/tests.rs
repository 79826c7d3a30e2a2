//! Freeze bodies, scopes and the skipped record's text, table-driven.

use serde_json::json;

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("time")
        .with_timezone(&Utc)
}

const NOW: &str = "2026-12-01T00:00:00Z";

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => panic!("an object"),
    }
}

#[test]
fn valid_bodies() {
    let cases = [
        (
            json!({"from": "2026-12-02T22:00:00+08:00", "to": "2026-12-02T23:00:00+08:00", "scope": "all", "reason": " 发布 "}),
            FreezeScope::All,
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "group", "group": "finance", "reason": "r"}),
            FreezeScope::Group("finance".into()),
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "handler", "handler": "http.call", "reason": "r"}),
            FreezeScope::Handler("http.call".into()),
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "jobIds", "jobIds": [3, 1, 3], "reason": "r"}),
            FreezeScope::JobIds(vec![1, 3]),
        ),
        // A window that already began but ends in the future is valid (a
        // create may declare one at once).
        (
            json!({"from": "2026-11-30T00:00:00Z", "to": "2026-12-01T00:00:01Z", "scope": "all", "reason": "r"}),
            FreezeScope::All,
        ),
    ];
    for (input, scope) in cases {
        let spec =
            validate(&body(input.clone()), t(NOW)).unwrap_or_else(|e| panic!("{input}: {e:?}"));
        assert_eq!(spec.scope, scope, "{input}");
        assert!(spec.from < spec.to);
        assert!(!spec.reason.starts_with(' '));
    }
}

#[test]
fn invalid_bodies_name_each_field() {
    let cases = [
        (json!({}), vec!["from", "to", "reason", "scope"]),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-01T00:00:00Z", "scope": "all", "reason": "r"}),
            vec!["to"],
        ),
        (
            json!({"from": "2026-11-01T00:00:00Z", "to": "2026-11-30T00:00:00Z", "scope": "all", "reason": "r"}),
            vec!["to"],
        ),
        (
            json!({"from": "tomorrow", "to": 5, "scope": "all", "reason": "  "}),
            vec!["from", "to", "reason"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "everything", "reason": "r"}),
            vec!["scope"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "all", "group": "g", "reason": "r"}),
            vec!["group"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "handler", "handler": "h", "jobIds": null, "reason": "r"}),
            vec!["jobIds"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "group", "reason": "r"}),
            vec!["group"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "jobIds", "jobIds": [], "reason": "r"}),
            vec!["jobIds"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "jobIds", "jobIds": [0, "x"], "reason": "r"}),
            vec!["jobIds"],
        ),
        (
            json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-03T00:00:00Z", "scope": "all", "reason": "a\nb", "extra": 1}),
            vec!["extra", "reason"],
        ),
    ];
    for (input, fields) in cases {
        let errors = validate(&body(input.clone()), t(NOW)).expect_err("refused");
        let mut got: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        let mut want = fields.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{input}: {errors:?}");
        for e in &errors {
            assert!(!e.message(Lang::Zh).is_empty() && !e.message(Lang::En).is_empty());
        }
    }
}

#[test]
fn which_jobs_and_times_a_freeze_holds() {
    let freeze = |id, scope| Freeze {
        id,
        from: t("2026-12-02T10:00:00Z"),
        to: t("2026-12-02T11:00:00Z"),
        scope,
        reason: "r".into(),
    };
    let cases = [
        // (scope, job, group, handler, at, frozen)
        (FreezeScope::All, 1, "g", "h", "2026-12-02T10:00:00Z", true),
        (FreezeScope::All, 1, "g", "h", "2026-12-02T10:59:59Z", true),
        (FreezeScope::All, 1, "g", "h", "2026-12-02T11:00:00Z", false),
        (FreezeScope::All, 1, "g", "h", "2026-12-02T09:59:59Z", false),
        (
            FreezeScope::Group("g".into()),
            1,
            "g",
            "h",
            "2026-12-02T10:30:00Z",
            true,
        ),
        (
            FreezeScope::Group("g".into()),
            1,
            "G",
            "h",
            "2026-12-02T10:30:00Z",
            false,
        ),
        (
            FreezeScope::Handler("h".into()),
            1,
            "g",
            "h",
            "2026-12-02T10:30:00Z",
            true,
        ),
        (
            FreezeScope::Handler("x".into()),
            1,
            "g",
            "h",
            "2026-12-02T10:30:00Z",
            false,
        ),
        (
            FreezeScope::JobIds(vec![1, 2]),
            2,
            "g",
            "h",
            "2026-12-02T10:30:00Z",
            true,
        ),
        (
            FreezeScope::JobIds(vec![1, 2]),
            3,
            "g",
            "h",
            "2026-12-02T10:30:00Z",
            false,
        ),
    ];
    for (scope, job, group, handler, at, frozen) in cases {
        let f = freeze(7, scope.clone());
        assert_eq!(
            f.freezes(job, group, handler, t(at)),
            frozen,
            "{scope:?} {job} {at}"
        );
        let list = [f];
        assert_eq!(
            freezing(&list, job, group, handler, t(at)).is_some(),
            frozen
        );
    }
    // Of two freezes holding a time, the earlier-starting one names it.
    let mut early = freeze(9, FreezeScope::All);
    early.from = t("2026-12-02T09:00:00Z");
    let list = [freeze(7, FreezeScope::All), early];
    assert_eq!(
        freezing(&list, 1, "g", "h", t("2026-12-02T10:30:00Z")).map(|f| f.id),
        Some(9)
    );
}

#[test]
fn skipped_record_names_the_freeze_its_reason_and_count() {
    let freeze = Freeze {
        id: 12,
        from: t("2026-12-02T10:00:00Z"),
        to: t("2026-12-02T11:00:00Z"),
        scope: FreezeScope::All,
        reason: "版本发布".into(),
    };
    let missed = Missed {
        first: t("2026-12-02T10:00:00Z"),
        last: t("2026-12-02T10:55:00Z"),
        count: 12,
        capped: false,
    };
    let text = frozen_text(&freeze, &missed, chrono_tz::Asia::Shanghai);
    assert!(
        text.contains("#12") && text.contains("版本发布") && text.contains("12"),
        "{text}"
    );
    assert!(text.contains("2026-12-02 18:00:00 +08:00"), "{text}");
    assert!(catch_up_note(&freeze).contains("#12"));
}

#[test]
fn spans_split_at_freeze_windows() {
    // Every minute; a freeze 10:05–10:10 for every job, one 10:20–10:25
    // for job 2 only.
    let schedule = crate::Schedule::new(
        crate::CronExpr::parse("0 * * * * *").expect("cron"),
        chrono_tz::UTC,
    );
    let freezes = [
        Freeze {
            id: 1,
            from: t("2026-12-02T10:05:00Z"),
            to: t("2026-12-02T10:10:00Z"),
            scope: FreezeScope::All,
            reason: "r".into(),
        },
        Freeze {
            id: 2,
            from: t("2026-12-02T10:20:00Z"),
            to: t("2026-12-02T10:25:00Z"),
            scope: FreezeScope::JobIds(vec![2]),
            reason: "r".into(),
        },
    ];
    let cases = [
        // (job, after, through, expected (first, last, count, freeze id))
        (
            1,
            "10:00:00",
            "10:03:00",
            Some(("10:01:00", "10:03:00", 3, None)),
        ),
        // Plain times stop before the first frozen one.
        (
            1,
            "10:00:00",
            "10:30:00",
            Some(("10:01:00", "10:04:00", 4, None)),
        ),
        // A frozen first time: the whole window, even past `through`.
        (
            1,
            "10:04:00",
            "10:06:00",
            Some(("10:05:00", "10:09:00", 5, Some(1))),
        ),
        // After the window: plain again; job 1 is not in freeze 2.
        (
            1,
            "10:09:00",
            "10:30:00",
            Some(("10:10:00", "10:30:00", 21, None)),
        ),
        (
            2,
            "10:09:00",
            "10:30:00",
            Some(("10:10:00", "10:19:00", 10, None)),
        ),
        (
            2,
            "10:19:00",
            "10:30:00",
            Some(("10:20:00", "10:24:00", 5, Some(2))),
        ),
        // A window that began before the chain's tip covers what is left.
        (
            1,
            "10:06:00",
            "10:07:00",
            Some(("10:07:00", "10:09:00", 3, Some(1))),
        ),
        (1, "10:09:00", "10:09:30", None),
    ];
    let at = |hms: &str| t(&format!("2026-12-02T{hms}Z"));
    for (job, after, through, want) in cases {
        let got = first_span(&schedule, &freezes, (job, "g", "h"), at(after), at(through))
            .map(|(m, f)| (m.first, m.last, m.count, f.map(|f| f.id)));
        let want = want.map(|(first, last, count, id)| (at(first), at(last), count, id));
        assert_eq!(got, want, "job {job} after {after} through {through}");
    }
}

//! Notification templates (SPEC §8): the templates this service sends, their
//! first text, the `{placeholder}` substitution, and the rules an edited
//! template must follow.

use crate::lang::Lang;

/// The shared inbox every super administrator reads. Users live in the
/// platform, not here, so alerts go to the role rather than to people.
pub const SUPER_ADMINS: &str = "super_admins";

/// Raised when an attempt runs past its timeout.
pub const TIMEOUT_ALERT: &str = "scheduler.timeout_alert";

/// Raised when a fire ends `failed` or `timeout` after its retries and the
/// job's policy asks for it (`alertOnFailure`).
pub const FAILURE_ALERT: &str = "scheduler.failure_alert";
/// Raised when a job's fires failed N times in a row
/// (`alertAfterConsecutiveFailures`).
pub const CONSECUTIVE_FAILURES_ALERT: &str = "scheduler.consecutive_failures_alert";
/// Raised on the first success after an alerted failure (`alertOnRecovery`).
pub const RECOVERY_ALERT: &str = "scheduler.recovery_alert";
/// Raised once per job and year when the job's calendar has no data for a
/// year its schedule is about to reach (issue 11).
pub const CALENDAR_DATA_ALERT: &str = "scheduler.calendar_data_alert";

/// What the failure, streak and recovery alerts fill in.
const FIRE_END_PLACEHOLDERS: &[&str] = &[
    "jobName", "jobId", "handler", "status", "error", "attempt", "time", "runId", "runLink",
    "failures",
];

/// Longest title an edited template may have.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest body an edited template may have.
pub const MAX_BODY_CHARS: usize = 4_000;

/// A template this service sends, with the text it is first seeded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateDef {
    pub code: &'static str,
    pub name_zh: &'static str,
    pub name_en: &'static str,
    /// The `{placeholder}` names the sender fills in.
    pub placeholders: &'static [&'static str],
    pub title_zh: &'static str,
    pub body_zh: &'static str,
    pub title_en: &'static str,
    pub body_en: &'static str,
}

impl TemplateDef {
    pub fn name(&self, lang: Lang) -> &'static str {
        lang.pick(self.name_zh, self.name_en)
    }
}

/// Every template this service sends.
pub const TEMPLATES: [TemplateDef; 5] = [
    TemplateDef {
        code: TIMEOUT_ALERT,
        name_zh: "任务超时告警",
        name_en: "Job timeout alert",
        placeholders: &[
            "jobName",
            "jobId",
            "handler",
            "timeoutMs",
            "startedAt",
            "attempt",
        ],
        title_zh: "任务超时：{jobName}",
        body_zh: "任务“{jobName}”（处理器 {handler}）运行超过 {timeoutMs} 毫秒，已判定为超时并通知处理器停止。开始时间：{startedAt}；第 {attempt} 次尝试。",
        title_en: "Job timed out: {jobName}",
        body_en: "Job “{jobName}” (handler {handler}) ran longer than {timeoutMs} ms; it was recorded as timed out and told to stop. Started at {startedAt}; attempt {attempt}.",
    },
    TemplateDef {
        code: FAILURE_ALERT,
        name_zh: "任务失败告警",
        name_en: "Job failure alert",
        placeholders: FIRE_END_PLACEHOLDERS,
        title_zh: "任务失败：{jobName}",
        body_zh: "任务“{jobName}”（ID {jobId}，处理器 {handler}）重试后仍未成功，结果：{status}，共 {attempt} 次尝试。结束时间：{time}。错误摘要：{error}。执行记录：{runId}（{runLink}）",
        title_en: "Job failed: {jobName}",
        body_en: "Job “{jobName}” (id {jobId}, handler {handler}) did not succeed after its retries: {status} after {attempt} attempt(s). Ended at {time}. Error: {error}. Run {runId} ({runLink})",
    },
    TemplateDef {
        code: CONSECUTIVE_FAILURES_ALERT,
        name_zh: "任务连续失败告警",
        name_en: "Consecutive failures alert",
        placeholders: FIRE_END_PLACEHOLDERS,
        title_zh: "任务连续失败 {failures} 次：{jobName}",
        body_zh: "任务“{jobName}”（ID {jobId}，处理器 {handler}）已连续 {failures} 次执行失败，最近一次结果：{status}，第 {attempt} 次尝试，结束时间：{time}。错误摘要：{error}。执行记录：{runId}（{runLink}）",
        title_en: "Job failed {failures} times in a row: {jobName}",
        body_en: "Job “{jobName}” (id {jobId}, handler {handler}) failed {failures} times in a row; the last ended {status} on attempt {attempt} at {time}. Error: {error}. Run {runId} ({runLink})",
    },
    TemplateDef {
        code: RECOVERY_ALERT,
        name_zh: "任务恢复通知",
        name_en: "Job recovery notice",
        placeholders: FIRE_END_PLACEHOLDERS,
        title_zh: "任务已恢复：{jobName}",
        body_zh: "任务“{jobName}”（ID {jobId}，处理器 {handler}）在连续 {failures} 次失败后已执行成功（第 {attempt} 次尝试，结束时间：{time}）。执行记录：{runId}（{runLink}）",
        title_en: "Job recovered: {jobName}",
        body_en: "Job “{jobName}” (id {jobId}, handler {handler}) succeeded after {failures} failed fire(s) (attempt {attempt}, ended at {time}). Run {runId} ({runLink})",
    },
    TemplateDef {
        code: CALENDAR_DATA_ALERT,
        name_zh: "日历数据缺失告警",
        name_en: "Calendar data missing alert",
        placeholders: &["jobName", "jobId", "handler", "calendar", "year", "notice"],
        title_zh: "日历 {calendar} 缺少 {year} 年数据：{jobName}",
        body_zh: "任务“{jobName}”（ID {jobId}，处理器 {handler}）：{notice}",
        title_en: "Calendar {calendar} has no data for {year}: {jobName}",
        body_en: "Job “{jobName}” (id {jobId}, handler {handler}): {notice}",
    },
];

/// The definition of a known template code.
pub fn find(code: &str) -> Option<&'static TemplateDef> {
    TEMPLATES.iter().find(|t| t.code == code)
}

/// Replaces each `{name}` whose name is in `vars`; anything else, unknown
/// names and lone braces included, is kept as written. One pass, so a value
/// that itself contains `{…}` (a job name, say) is never expanded again.
pub fn render(text: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The names written as `{name}` (a letter, then letters, digits or `_`).
pub fn placeholders_in(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_placeholder_name(&after[..close]) => {
                names.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    names
}

fn is_placeholder_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why an edited template text is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateProblem {
    Blank,
    TooLong {
        max: usize,
        chars: usize,
    },
    /// U+0000, which no database column of text can hold (PostgreSQL
    /// refuses it); line breaks and tabs are fine in a template.
    NulCharacter,
    /// `{name}` that the sender never fills in: almost always a typo.
    UnknownPlaceholder {
        name: String,
        known: Vec<String>,
    },
}

/// One refused field (`titleZh`, `bodyZh`, `titleEn` or `bodyEn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFieldError {
    pub field: &'static str,
    pub problem: TemplateProblem,
}

impl TemplateFieldError {
    pub fn message(&self, lang: Lang) -> String {
        match (&self.problem, lang) {
            (TemplateProblem::Blank, Lang::Zh) => "不能为空".into(),
            (TemplateProblem::Blank, Lang::En) => "Must not be empty".into(),
            (TemplateProblem::TooLong { max, chars }, Lang::Zh) => {
                format!("最多 {max} 个字，现在有 {chars} 个")
            }
            (TemplateProblem::TooLong { max, chars }, Lang::En) => {
                format!("At most {max} characters, got {chars}")
            }
            (TemplateProblem::NulCharacter, Lang::Zh) => "不能包含 U+0000（空字符）".into(),
            (TemplateProblem::NulCharacter, Lang::En) => {
                "Must not contain U+0000 (the NUL character)".into()
            }
            (TemplateProblem::UnknownPlaceholder { name, known }, Lang::Zh) => {
                format!("占位符 {{{name}}} 不存在：可用的占位符是 {}", braced(known))
            }
            (TemplateProblem::UnknownPlaceholder { name, known }, Lang::En) => format!(
                "There is no placeholder {{{name}}}: the available ones are {}",
                braced(known)
            ),
        }
    }
}

fn braced(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{{{n}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The four texts of a template, as edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateTexts<'a> {
    pub title_zh: &'a str,
    pub body_zh: &'a str,
    pub title_en: &'a str,
    pub body_en: &'a str,
}

/// Checks an edit of `def`: every text non-blank, titles at most
/// [`MAX_TITLE_CHARS`], bodies at most [`MAX_BODY_CHARS`], and only the
/// template's own placeholders. All problems are reported at once.
pub fn validate_template(
    def: &TemplateDef,
    texts: &TemplateTexts<'_>,
) -> Result<(), Vec<TemplateFieldError>> {
    let fields = [
        ("titleZh", texts.title_zh, MAX_TITLE_CHARS),
        ("bodyZh", texts.body_zh, MAX_BODY_CHARS),
        ("titleEn", texts.title_en, MAX_TITLE_CHARS),
        ("bodyEn", texts.body_en, MAX_BODY_CHARS),
    ];
    let mut errors = Vec::new();
    for (field, text, max) in fields {
        let chars = text.chars().count();
        let problem = if text.trim().is_empty() {
            Some(TemplateProblem::Blank)
        } else if chars > max {
            Some(TemplateProblem::TooLong { max, chars })
        } else if text.contains('\0') {
            Some(TemplateProblem::NulCharacter)
        } else {
            placeholders_in(text)
                .into_iter()
                .find(|p| !def.placeholders.contains(p))
                .map(|name| TemplateProblem::UnknownPlaceholder {
                    name: name.to_string(),
                    known: def.placeholders.iter().map(|s| s.to_string()).collect(),
                })
        };
        if let Some(problem) = problem {
            errors.push(TemplateFieldError { field, problem });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_table() {
        let vars = [("jobName", "夜间{报表}"), ("attempt", "2")];
        let cases = [
            ("任务超时：{jobName}", "任务超时：夜间{报表}"),
            ("{attempt}/{attempt}", "2/2"),
            ("no placeholders", "no placeholders"),
            ("{unknown} stays", "{unknown} stays"),
            ("lone { brace", "lone { brace"),
            ("lone } brace", "lone } brace"),
            ("{{jobName}}", "{夜间{报表}}"),
            ("{", "{"),
            ("", ""),
            ("尾部{jobName", "尾部{jobName"),
        ];
        for (text, want) in cases {
            assert_eq!(render(text, &vars), want, "{text}");
        }
    }

    #[test]
    fn placeholders_are_found() {
        assert_eq!(
            placeholders_in("{a} {b_1} {1x} { c } {} {d"),
            vec!["a", "b_1"]
        );
        for t in TEMPLATES {
            for text in [t.title_zh, t.body_zh, t.title_en, t.body_en] {
                for p in placeholders_in(text) {
                    assert!(t.placeholders.contains(&p), "{} uses {p}", t.code);
                }
            }
        }
    }

    #[test]
    fn seeded_texts_are_valid_and_name_what_the_spec_asks() {
        let t = find(TIMEOUT_ALERT).expect("timeout alert");
        let texts = TemplateTexts {
            title_zh: t.title_zh,
            body_zh: t.body_zh,
            title_en: t.title_en,
            body_en: t.body_en,
        };
        assert_eq!(validate_template(t, &texts), Ok(()));
        assert!(t.title_zh.starts_with("任务超时："));
        for p in ["{handler}", "{timeoutMs}", "{startedAt}", "{attempt}"] {
            assert!(t.body_zh.contains(p) && t.body_en.contains(p), "{p}");
        }
        assert_eq!(t.name(Lang::En), "Job timeout alert");
        assert!(find("nope").is_none());
    }

    #[test]
    fn edits_are_checked() {
        let t = find(TIMEOUT_ALERT).expect("template");
        let long_title = "x".repeat(MAX_TITLE_CHARS + 1);
        let texts = TemplateTexts {
            title_zh: " ",
            body_zh: "看 {jobNmae}",
            title_en: &long_title,
            body_en: "fine {attempt}",
        };
        let errors = validate_template(t, &texts).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["titleZh", "bodyZh", "titleEn"]);
        assert_eq!(errors[0].message(Lang::En), "Must not be empty");
        assert!(errors[1].message(Lang::Zh).contains("{jobNmae}"));
        assert!(errors[1].message(Lang::En).contains("{jobName}"));
        assert_eq!(
            errors[2].problem,
            TemplateProblem::TooLong {
                max: MAX_TITLE_CHARS,
                chars: MAX_TITLE_CHARS + 1
            }
        );
    }

    #[test]
    fn nul_is_refused_but_line_breaks_are_kept() {
        let t = find(TIMEOUT_ALERT).expect("template");
        let texts = TemplateTexts {
            title_zh: "超时\0",
            body_zh: "第一行\n第二行\t{attempt}",
            title_en: "Timed out",
            body_en: "line\r\nline",
        };
        let errors = validate_template(t, &texts).expect_err("invalid");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "titleZh");
        assert_eq!(errors[0].problem, TemplateProblem::NulCharacter);
    }
}

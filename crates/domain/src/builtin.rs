//! The built-in jobs of SPEC §7, seeded once for handlers that are
//! registered, and found again by handler plus original name.

use crate::job::MisfirePolicy;
use crate::lang::Lang;

/// One built-in job as first seeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinJob {
    pub handler: &'static str,
    pub name_zh: &'static str,
    pub name_en: &'static str,
    pub cron: &'static str,
    pub enabled: bool,
    pub misfire: MisfirePolicy,
    pub group: &'static str,
    pub timeout_ms: i64,
}

impl BuiltinJob {
    /// The marker stored with the job: handler plus original name.
    pub fn key(&self) -> String {
        format!("{}|{}", self.handler, self.name_zh)
    }

    pub fn name(&self, lang: Lang) -> &'static str {
        lang.pick(self.name_zh, self.name_en)
    }
}

pub const BUILTIN_JOBS: [BuiltinJob; 5] = [
    BuiltinJob {
        handler: "audit.purge",
        name_zh: "清理过期日志",
        name_en: "Purge expired logs",
        cron: "0 30 3 * * *",
        enabled: true,
        misfire: MisfirePolicy::RunOnce,
        group: "system",
        timeout_ms: 600_000,
    },
    BuiltinJob {
        handler: "session.sweep",
        name_zh: "清理过期在线会话",
        name_en: "Sweep expired sessions",
        cron: "0 */10 * * * *",
        enabled: true,
        misfire: MisfirePolicy::Skip,
        group: "system",
        timeout_ms: 60_000,
    },
    BuiltinJob {
        handler: "notify.dispatch",
        name_zh: "派发待发送通知",
        name_en: "Dispatch pending notifications",
        cron: "0 * * * * *",
        enabled: true,
        misfire: MisfirePolicy::Skip,
        group: "system",
        timeout_ms: 60_000,
    },
    BuiltinJob {
        handler: "wf.task.remind",
        name_zh: "发送待办超时提醒",
        name_en: "Send overdue to-do reminders",
        cron: "0 */5 * * * *",
        enabled: true,
        misfire: MisfirePolicy::Skip,
        group: "system",
        timeout_ms: 60_000,
    },
    BuiltinJob {
        handler: "demo.echo",
        name_zh: "示例：回显消息",
        name_en: "Example: echo a message",
        cron: "0 0 * * * *",
        enabled: false,
        misfire: MisfirePolicy::Skip,
        group: "default",
        timeout_ms: 60_000,
    },
];

/// The built-in job a stored marker names.
pub fn by_key(key: &str) -> Option<&'static BuiltinJob> {
    BUILTIN_JOBS.iter().find(|b| b.key() == key)
}

/// The name to show: localized while the job keeps its original name.
pub fn display_name<'a>(stored: &'a str, key: Option<&str>, lang: Lang) -> &'a str {
    match key.and_then(by_key) {
        Some(b) if b.name_zh == stored => b.name(lang),
        _ => stored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::CronExpr;

    #[test]
    fn builtins_are_valid_and_localized() {
        for b in BUILTIN_JOBS {
            assert!(CronExpr::parse(b.cron).is_ok(), "{}", b.cron);
            assert_eq!(by_key(&b.key()), Some(&b));
            assert_eq!(display_name(b.name_zh, Some(&b.key()), Lang::En), b.name_en);
            assert_eq!(display_name(b.name_zh, Some(&b.key()), Lang::Zh), b.name_zh);
            // A renamed built-in keeps its new name in every language.
            assert_eq!(display_name("mine", Some(&b.key()), Lang::En), "mine");
        }
        assert_eq!(display_name("x", None, Lang::En), "x");
    }
}

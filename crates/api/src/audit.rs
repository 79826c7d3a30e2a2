//! Writing the audit log (SPEC §9): who created, modified, enabled or
//! disabled, deleted, exported or ran a job, and who deleted, cleared or
//! exported runs, with before/after values, who created or revoked an
//! API key, and who created, changed or deleted a calendar.
//!
//! Job writes store their entries in the write's own transaction
//! (`jobs_service`, with [`Entry::by`]); settings and templates are audited
//! by the storage crate itself. The other handlers call [`record`] right
//! after their change succeeded, in the same request.

use chrono::Utc;
use qiwu_domain::Lang;
use qiwu_storage::NewAudit;
use serde_json::Value;

use crate::auth::Principal;
use crate::state::AppState;

/// What was done; stored as its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    JobCreate,
    JobModify,
    JobEnable,
    JobDisable,
    JobDelete,
    JobExport,
    JobRun,
    JobBackfill,
    JobBackfillCancel,
    RunDelete,
    RunClear,
    RunExport,
    RunCancel,
    /// Written by the storage crate with the change itself.
    SettingModify,
    /// Written by the storage crate with the change itself.
    TemplateModify,
    ApiKeyCreate,
    ApiKeyRevoke,
    CalendarCreate,
    CalendarModify,
    CalendarDelete,
    AlertChannelCreate,
    AlertChannelModify,
    AlertChannelDelete,
    FreezeCreate,
    FreezeModify,
    FreezeDelete,
}

impl Action {
    pub const ALL: [Action; 26] = [
        Action::JobCreate,
        Action::JobModify,
        Action::JobEnable,
        Action::JobDisable,
        Action::JobDelete,
        Action::JobExport,
        Action::JobRun,
        Action::JobBackfill,
        Action::JobBackfillCancel,
        Action::RunDelete,
        Action::RunClear,
        Action::RunExport,
        Action::RunCancel,
        Action::SettingModify,
        Action::TemplateModify,
        Action::ApiKeyCreate,
        Action::ApiKeyRevoke,
        Action::CalendarCreate,
        Action::CalendarModify,
        Action::CalendarDelete,
        Action::AlertChannelCreate,
        Action::AlertChannelModify,
        Action::AlertChannelDelete,
        Action::FreezeCreate,
        Action::FreezeModify,
        Action::FreezeDelete,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Action::JobCreate => "job.create",
            Action::JobModify => "job.modify",
            Action::JobEnable => "job.enable",
            Action::JobDisable => "job.disable",
            Action::JobDelete => "job.delete",
            Action::JobExport => "job.export",
            Action::JobRun => "job.run",
            Action::JobBackfill => "job.backfill",
            Action::JobBackfillCancel => "job.backfill_cancel",
            Action::RunDelete => "run.delete",
            Action::RunClear => "run.clear",
            Action::RunExport => "run.export",
            Action::RunCancel => "run.cancel",
            Action::SettingModify => qiwu_storage::SETTING_MODIFY_ACTION,
            Action::TemplateModify => qiwu_storage::TEMPLATE_MODIFY_ACTION,
            Action::ApiKeyCreate => "apikey.create",
            Action::ApiKeyRevoke => "apikey.revoke",
            Action::CalendarCreate => "calendar.create",
            Action::CalendarModify => "calendar.modify",
            Action::CalendarDelete => "calendar.delete",
            Action::AlertChannelCreate => "alertchannel.create",
            Action::AlertChannelModify => "alertchannel.modify",
            Action::AlertChannelDelete => "alertchannel.delete",
            Action::FreezeCreate => "freeze.create",
            Action::FreezeModify => "freeze.modify",
            Action::FreezeDelete => "freeze.delete",
        }
    }

    pub fn from_code(code: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.code() == code)
    }

    /// The action as a person reads it.
    pub fn label(self, lang: Lang) -> &'static str {
        let (zh, en) = match self {
            Action::JobCreate => ("创建任务", "Create job"),
            Action::JobModify => ("修改任务", "Modify job"),
            Action::JobEnable => ("启用任务", "Enable job"),
            Action::JobDisable => ("停用任务", "Disable job"),
            Action::JobDelete => ("删除任务", "Delete job"),
            Action::JobExport => ("导出任务", "Export jobs"),
            Action::JobRun => ("执行一次", "Run job once"),
            Action::JobBackfill => ("补跑", "Backfill job"),
            Action::JobBackfillCancel => ("取消补跑", "Cancel backfill"),
            Action::RunDelete => ("删除执行记录", "Delete runs"),
            Action::RunClear => ("清空执行记录", "Clear runs"),
            Action::RunExport => ("导出执行记录", "Export runs"),
            Action::RunCancel => ("取消执行", "Cancel run"),
            Action::SettingModify => ("修改参数", "Modify setting"),
            Action::TemplateModify => ("修改站内信模板", "Modify notification template"),
            Action::ApiKeyCreate => ("创建 API 密钥", "Create API key"),
            Action::ApiKeyRevoke => ("吊销 API 密钥", "Revoke API key"),
            Action::CalendarCreate => ("创建日历", "Create calendar"),
            Action::CalendarModify => ("修改日历", "Modify calendar"),
            Action::CalendarDelete => ("删除日历", "Delete calendar"),
            Action::AlertChannelCreate => ("创建告警渠道", "Create alert channel"),
            Action::AlertChannelModify => ("修改告警渠道", "Modify alert channel"),
            Action::AlertChannelDelete => ("删除告警渠道", "Delete alert channel"),
            Action::FreezeCreate => ("创建冻结窗口", "Create freeze"),
            Action::FreezeModify => ("修改冻结窗口", "Modify freeze"),
            Action::FreezeDelete => ("删除冻结窗口", "Delete freeze"),
        };
        lang.pick(zh, en)
    }
}

/// What kind of object an action touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Job,
    Run,
    Setting,
    Template,
    ApiKey,
    Calendar,
    AlertChannel,
    Freeze,
}

impl Target {
    pub const ALL: [Target; 8] = [
        Target::Job,
        Target::Run,
        Target::Setting,
        Target::Template,
        Target::ApiKey,
        Target::Calendar,
        Target::AlertChannel,
        Target::Freeze,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Target::Job => "job",
            Target::Run => "run",
            Target::Setting => qiwu_storage::SETTING_TARGET,
            Target::Template => qiwu_storage::TEMPLATE_TARGET,
            Target::ApiKey => "apikey",
            Target::Calendar => "calendar",
            Target::AlertChannel => "alert_channel",
            Target::Freeze => "freeze",
        }
    }
}

/// One entry before it is stamped with its actor and time.
#[derive(Debug, Clone)]
pub struct Entry {
    pub action: Action,
    pub target_type: Target,
    /// `None` for actions on many objects.
    pub target_id: Option<String>,
    /// One line a person reads.
    pub summary: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl Entry {
    /// The entry as `who` made it, ready to store (stamped with its time
    /// when it is written).
    pub fn by(self, who: &Principal) -> NewAudit {
        NewAudit {
            actor: who.actor(),
            action: self.action.code().to_owned(),
            target_type: self.target_type.code().to_owned(),
            target_id: self.target_id,
            summary: self.summary,
            before: self.before,
            after: self.after,
        }
    }
}

/// Appends one entry for `who`, stamped now. See [`record_all`] for what
/// happens when it cannot be stored.
#[allow(clippy::too_many_arguments)] // one call reads as one audit line
pub async fn record(
    state: &AppState,
    who: &Principal,
    action: Action,
    target_type: Target,
    target_id: Option<String>,
    summary: String,
    before: Option<Value>,
    after: Option<Value>,
) {
    let entry = Entry {
        action,
        target_type,
        target_id,
        summary,
        before,
        after,
    };
    record_all(state, who, vec![entry]).await;
}

/// Appends entries for `who`, stamped now, in one transaction.
///
/// The change they describe is already committed, so a failure here does
/// not fail the request (the change stands, and the client must hear so);
/// the entries are written to the service log at error level instead, in
/// full, so that they are not lost.
pub async fn record_all(state: &AppState, who: &Principal, entries: Vec<Entry>) {
    let entries: Vec<NewAudit> = entries.into_iter().map(|e| e.by(who)).collect();
    if let Err(e) = state.store.audit().record_many(&entries, Utc::now()).await {
        for entry in &entries {
            tracing::error!(
                error = %e,
                cause = ?std::error::Error::source(&e),
                actor = %entry.actor,
                action = %entry.action,
                target_type = %entry.target_type,
                target_id = ?entry.target_id,
                summary = %entry.summary,
                before = ?entry.before,
                after = ?entry.after,
                "audit entry could not be stored"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for a in Action::ALL {
            assert_eq!(Action::from_code(a.code()), Some(a));
            assert!(!a.label(Lang::Zh).is_empty());
            assert!(!a.label(Lang::En).is_empty());
        }
        assert_eq!(Action::from_code("job.nuke"), None);
    }
}

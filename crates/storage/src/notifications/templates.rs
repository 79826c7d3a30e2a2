//! Notification templates (SPEC §8): seeded once per code, edited with
//! their audit row in one transaction.

use chrono::{DateTime, Utc};
use qiwu_domain::notify::{TEMPLATES, TemplateDef};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveModelTrait, EntityTrait, QuerySelect};
use serde_json::json;

use crate::entity::{audit_log, notification_template};
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// The audit action of a template edit.
pub const TEMPLATE_MODIFY_ACTION: &str = "template.modify";
/// The audit target type of a template edit (the target id is the code).
pub const TEMPLATE_TARGET: &str = "notification_template";
/// Who seeds templates.
const SYSTEM_ACTOR: &str = "system";

/// A stored template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRecord {
    pub code: String,
    pub title_zh: String,
    pub body_zh: String,
    pub title_en: String,
    pub body_en: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl TryFrom<notification_template::Model> for TemplateRecord {
    type Error = StorageError;

    fn try_from(m: notification_template::Model) -> Result<Self, Self::Error> {
        Ok(TemplateRecord {
            code: m.code,
            title_zh: m.title_zh,
            body_zh: m.body_zh,
            title_en: m.title_en,
            body_en: m.body_en,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
        })
    }
}

/// The four editable texts of a template; already validated by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateTexts {
    pub title_zh: String,
    pub body_zh: String,
    pub title_en: String,
    pub body_en: String,
}

impl From<&TemplateDef> for TemplateTexts {
    fn from(d: &TemplateDef) -> Self {
        TemplateTexts {
            title_zh: d.title_zh.to_owned(),
            body_zh: d.body_zh.to_owned(),
            title_en: d.title_en.to_owned(),
            body_en: d.body_en.to_owned(),
        }
    }
}

/// Template table access; obtained from [`Store::templates`].
pub struct TemplateRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn templates(&self) -> TemplateRepo<'_> {
        TemplateRepo { store: self }
    }
}

impl TemplateRepo<'_> {
    pub async fn get(&self, code: &str) -> Result<Option<TemplateRecord>, StorageError> {
        notification_template::Entity::find_by_id(code.to_owned())
            .one(self.store.connection())
            .await?
            .map(TemplateRecord::try_from)
            .transpose()
    }

    /// Every stored template, by code.
    pub async fn list(&self) -> Result<Vec<TemplateRecord>, StorageError> {
        let mut rows = notification_template::Entity::find()
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(TemplateRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        rows.sort_by(|a, b| a.code.cmp(&b.code));
        Ok(rows)
    }

    /// Replaces the texts of a stored template and audits the change
    /// (`template.modify`, before/after texts) in the same transaction.
    /// `NotFound` when no such template is stored.
    pub async fn update(
        &self,
        code: &str,
        texts: &TemplateTexts,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<TemplateRecord, StorageError> {
        let txn = self.store.begin_write().await?;
        let current = notification_template::Entity::find_by_id(code.to_owned())
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        let now_ms = to_millis(now);
        let updated = notification_template::ActiveModel {
            code: Set(code.to_owned()),
            title_zh: Set(texts.title_zh.clone()),
            body_zh: Set(texts.body_zh.clone()),
            title_en: Set(texts.title_en.clone()),
            body_en: Set(texts.body_en.clone()),
            updated_at: Set(now_ms),
            updated_by: Set(actor.to_owned()),
        }
        .update(&txn)
        .await?;
        let texts_json = |m: &notification_template::Model| {
            json!({
                "titleZh": m.title_zh,
                "bodyZh": m.body_zh,
                "titleEn": m.title_en,
                "bodyEn": m.body_en,
            })
            .to_string()
        };
        audit_log::ActiveModel {
            id: NotSet,
            at: Set(now_ms),
            actor: Set(actor.to_owned()),
            action: Set(TEMPLATE_MODIFY_ACTION.to_owned()),
            target_type: Set(TEMPLATE_TARGET.to_owned()),
            target_id: Set(Some(code.to_owned())),
            summary: Set(format!("修改站内信模板 {code}")),
            before_json: Set(Some(texts_json(&current))),
            after_json: Set(Some(texts_json(&updated))),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        TemplateRecord::try_from(updated)
    }

    /// Seeds every template of `qiwu_domain::notify::TEMPLATES` once, ever
    /// (seed marker `template:{code}`), never overwriting a stored one.
    /// Returns the codes inserted by this call.
    ///
    /// The row goes in before the marker, with "insert unless present", so a
    /// crash between the two is repaired by the next start and can never
    /// overwrite an edit.
    pub async fn seed_defaults(&self, now: DateTime<Utc>) -> Result<Vec<String>, StorageError> {
        let db = self.store.connection();
        let mut seeded = Vec::new();
        for def in &TEMPLATES {
            let marker = format!("template:{}", def.code);
            if self.store.is_seeded(&marker).await? {
                continue;
            }
            let row = notification_template::ActiveModel {
                code: Set(def.code.to_owned()),
                title_zh: Set(def.title_zh.to_owned()),
                body_zh: Set(def.body_zh.to_owned()),
                title_en: Set(def.title_en.to_owned()),
                body_en: Set(def.body_en.to_owned()),
                updated_at: Set(to_millis(now)),
                updated_by: Set(SYSTEM_ACTOR.to_owned()),
            };
            // Whether this call inserted it is only reported, so a plain read
            // first will do (MySQL counts a conflicting row as affected).
            let present = notification_template::Entity::find_by_id(def.code.to_owned())
                .one(db)
                .await?
                .is_some();
            notification_template::Entity::insert(row)
                .on_conflict(
                    OnConflict::column(notification_template::Column::Code)
                        .do_nothing_on([notification_template::Column::Code])
                        .to_owned(),
                )
                .exec_without_returning(db)
                .await?;
            if !present {
                seeded.push(def.code.to_owned());
            }
            self.store.mark_seed_once(&marker, now).await?;
        }
        Ok(seeded)
    }
}

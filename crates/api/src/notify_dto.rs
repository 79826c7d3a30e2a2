//! Request and response bodies of settings, the notification inbox and
//! notification templates, with their OpenAPI schemas.

use chrono::{DateTime, Utc};
use qiwu_domain::Lang;
use qiwu_domain::notify;
use qiwu_domain::settings::SettingDef;
use qiwu_storage::{NotificationRecord, SettingRecord, TemplateRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// One setting this service knows.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingDto {
    #[schema(value_type = crate::schema::SettingKey)]
    pub key: String,
    /// The stored value, or the default while nothing is stored.
    pub value: String,
    /// What the setting does, in the request's language.
    pub description: String,
    pub default_value: String,
    /// Null while the default is in effect.
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
}

impl SettingDto {
    pub fn new(def: &SettingDef, stored: Option<SettingRecord>, lang: Lang) -> SettingDto {
        let (value, updated_at, updated_by) = match stored {
            Some(s) => (s.value, Some(s.updated_at), Some(s.updated_by)),
            None => (def.default.to_string(), None, None),
        };
        SettingDto {
            key: def.key.to_string(),
            value,
            description: def.description(lang).to_string(),
            default_value: def.default.to_string(),
            updated_at,
            updated_by,
        }
    }
}

/// A new value for a setting.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct SettingWrite {
    /// The value as text; a JSON number is accepted too (`30` means
    /// `"30"`). `audit.retention_days`: a whole number 1–36500;
    /// `notify.webhook_url`: empty, or an http(s) URL.
    #[schema(schema_with = setting_value)]
    pub value: Value,
}

fn setting_value() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ObjectBuilder::new().schema_type(Type::Number))
        .examples([serde_json::json!("30")])
        .build()
        .into()
}

impl SettingWrite {
    /// Reads the body: `value` as text (a number is written as text).
    pub fn read(body: Value) -> Result<String, crate::error::ApiError> {
        let mut f = crate::body::Fields::new(body, &["value"])?;
        let value = match f.value("value") {
            Some(Value::String(s)) => s,
            Some(Value::Number(n)) => n.to_string(),
            None => {
                f.fail("value", "value 必填", "value is required");
                String::new()
            }
            Some(_) => {
                f.fail(
                    "value",
                    "value 应为字符串（也可以是数字）",
                    "value must be a string (or a number)",
                );
                String::new()
            }
        };
        f.finish()?;
        Ok(value)
    }
}

/// A notification in the super administrators' shared inbox.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationDto {
    pub id: i64,
    /// The template it was made from.
    #[schema(value_type = crate::schema::TemplateCode)]
    pub template_code: String,
    /// Rendered when raised, in Chinese (the platform's default language).
    pub title: String,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub read: bool,
    /// When a super administrator first marked it read; the inbox is shared.
    pub read_at: Option<DateTime<Utc>>,
}

impl From<NotificationRecord> for NotificationDto {
    fn from(n: NotificationRecord) -> NotificationDto {
        NotificationDto {
            id: n.id,
            template_code: n.template_code,
            title: n.title,
            body: n.body,
            created_at: n.created_at,
            read: n.read_at.is_some(),
            read_at: n.read_at,
        }
    }
}

/// A page of the inbox, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationPage {
    pub items: Vec<NotificationDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Unread notifications in the whole inbox (for a badge).
    pub unread_count: u64,
}

/// Filters and paging of the inbox. Values are read as text so that a bad
/// one is answered with the name of its parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct NotificationQuery {
    /// Only unread notifications (`true`); default false.
    #[param(value_type = Option<bool>)]
    pub unread: Option<String>,
    /// 1–100, default 20.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// `nextCursor` of the previous page; empty for the first page.
    #[param(pattern = "^([0-9a-f]{32})?$")]
    pub cursor: Option<String>,
}

/// How many notifications were marked read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadAllDto {
    pub count: u64,
}

/// An editable notification template.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateDto {
    #[schema(value_type = crate::schema::TemplateCode)]
    pub code: String,
    /// The template's name in the request's language.
    pub name: String,
    pub title_zh: String,
    pub body_zh: String,
    pub title_en: String,
    pub body_en: String,
    /// The `{placeholder}` names the texts may use.
    pub placeholders: Vec<String>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl TemplateDto {
    pub fn new(t: TemplateRecord, lang: Lang) -> TemplateDto {
        let def = notify::find(&t.code);
        TemplateDto {
            name: def.map_or_else(|| t.code.clone(), |d| d.name(lang).to_string()),
            placeholders: def
                .map(|d| d.placeholders.iter().map(|p| p.to_string()).collect())
                .unwrap_or_default(),
            code: t.code,
            title_zh: t.title_zh,
            body_zh: t.body_zh,
            title_en: t.title_en,
            body_en: t.body_en,
            updated_at: t.updated_at,
            updated_by: t.updated_by,
        }
    }
}

/// New texts of a template; all four are required. Texts may use only
/// the template's own `{placeholders}`.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct TemplateWrite {
    /// 1–200 characters.
    #[schema(max_length = 200, pattern = r"\S")]
    pub title_zh: String,
    /// 1–4000 characters.
    #[schema(max_length = 4000, pattern = r"\S")]
    pub body_zh: String,
    /// 1–200 characters.
    #[schema(max_length = 200, pattern = r"\S")]
    pub title_en: String,
    /// 1–4000 characters.
    #[schema(max_length = 4000, pattern = r"\S")]
    pub body_en: String,
}

impl TemplateWrite {
    /// Reads the body; a missing text is reported as empty by the rules
    /// that follow, naming its field.
    pub fn read(body: Value) -> Result<TemplateWrite, crate::error::ApiError> {
        let mut f = crate::body::Fields::new(body, &["titleZh", "bodyZh", "titleEn", "bodyEn"])?;
        let title_zh = f.string("titleZh", false).unwrap_or_default();
        let body_zh = f.string("bodyZh", false).unwrap_or_default();
        let title_en = f.string("titleEn", false).unwrap_or_default();
        let body_en = f.string("bodyEn", false).unwrap_or_default();
        f.finish()?;
        Ok(TemplateWrite {
            title_zh,
            body_zh,
            title_en,
            body_en,
        })
    }
}

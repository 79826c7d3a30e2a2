//! Hand-built OpenAPI schemas for what the derive macros cannot say:
//! free-form objects (`additionalProperties: true`, so generators type them
//! as maps of any value rather than empty objects), the params a job body
//! may carry, id lists with bounds on each item, and the closed sets that
//! come from code tables (audit actions and targets, permission codes).

use serde_json::json;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};

use crate::audit::{Action, Target};
use crate::auth::Permission;
use crate::query::MAX_SAFE_INTEGER;

/// A text field that refuses control characters and must hold something
/// besides blanks (surrounding blanks are trimmed by the server).
pub const PLAIN_TEXT: &str = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$";

/// A JSON object with any members.
pub fn free_form_object() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .build()
        .into()
}

/// A free-form JSON object, or null.
pub fn nullable_free_form_object() -> Schema {
    ObjectBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::Object, Type::Null]))
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .build()
        .into()
}

/// What a job body's `params` may be: an object, a string holding one (a
/// form's text box), or null / an empty string for `{}`.
pub fn params_input() -> Schema {
    OneOfBuilder::new()
        .item(free_form_object())
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .content_media_type("application/json")
                .description(Some("The params as JSON text; blank means {}")),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "A JSON object valid against the handler's params schema (GET /api/handlers), \
             serialised at most 4000 characters; or a string holding one; null or blank means {}. \
             Defaults from the schema are filled in. Absent on update: kept, unless the \
             handler changes and the params are empty or still the old handler's defaults, \
             which become the new handler's defaults.",
        ))
        .examples([json!({"message": "hi", "delayMs": 0})])
        .build()
        .into()
}

/// 1 to 1000 ids, each a whole number from 1 to 2^53 − 1.
pub fn id_list() -> Schema {
    ids_described("1 to 1000 ids; ids that do not exist are ignored")
}

/// [`id_list`] for a batch that reports the ids naming no job.
pub fn reported_id_list() -> Schema {
    ids_described(
        "1 to 1000 job ids; ids that name no job are listed in `notFound`; send either `ids` or `group`",
    )
}

fn ids_described(description: &str) -> Schema {
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Int64,
                )))
                .minimum(Some(1))
                .maximum(Some(MAX_SAFE_INTEGER)),
        )
        .min_items(Some(1))
        .max_items(Some(crate::dto::IdList::MAX))
        .description(Some(description))
        .build()
        .into()
}

fn string_enum(values: Vec<&'static str>, description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .description(Some(description))
        .build()
        .into()
}

/// Declares a named schema (a component every use refers to, so generated
/// clients get one type) built from a code table.
macro_rules! code_enum {
    ($(#[$doc:meta])* $name:ident, $codes:expr, $description:literal) => {
        $(#[$doc])*
        pub struct $name;

        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                RefOr::T(string_enum($codes, $description))
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
        }
    };
}

code_enum!(
    /// An audit action code.
    AuditAction,
    Action::ALL.iter().map(|a| a.code()).collect(),
    "What was done, such as `job.modify`"
);
code_enum!(
    /// What an audited action was done to.
    AuditTarget,
    Target::ALL.iter().map(|t| t.code()).collect(),
    "What the action was done to"
);
code_enum!(
    /// The key of a setting this service knows.
    SettingKey,
    qiwu_domain::settings::SETTINGS.iter().map(|s| s.key).collect(),
    "A setting this service knows"
);
code_enum!(
    /// The code of a notification template this service sends.
    TemplateCode,
    qiwu_domain::notify::TEMPLATES.iter().map(|t| t.code).collect(),
    "A notification template this service sends"
);
code_enum!(
    /// What a probe says.
    HealthStatus,
    vec![crate::routes::health::LIVE, crate::routes::health::READY, crate::routes::health::UNREADY],
    "`ok` (alive, from `/healthz`), `ready` or `unready` (from `/readyz`; `reasons` says why)"
);
code_enum!(
    /// The kind of a problem.
    ProblemType,
    crate::error::PROBLEM_TYPES.to_vec(),
    "The kind of problem, as a URN"
);
code_enum!(
    /// A permission code of SPEC §9.
    PermissionCode,
    Permission::ALL.iter().map(|p| p.code()).collect(),
    "A permission code"
);

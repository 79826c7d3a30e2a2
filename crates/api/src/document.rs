//! Completes the generated OpenAPI document with what every operation
//! shares, in one place rather than on every handler: the error responses of
//! the extractors and of `routing` (400, 413, 414, 415), a description on
//! every response (the specification requires one), and the `links` that
//! let a client or a stateful tester go from what one answer returns to
//! the operations that take it.

use std::collections::BTreeMap;

use utoipa::openapi::Required;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{AdditionalProperties, Schema, SchemaType, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr};

use crate::error::MAX_BODY_BYTES;
use crate::routing::MAX_URI_BYTES;

/// The standard description of an error status, for responses that give
/// none of their own.
fn error_description(status: &str) -> Option<String> {
    let text = match status {
        "400" => {
            "Invalid input: `errors` names each bad field (a body field or a query \
             parameter) and says what is allowed"
        }
        "401" => {
            "No bearer token, or a token or API key that is malformed, forged, expired or \
             revoked (a token's `sub` may have at most 128 characters)"
        }
        "403" => "The caller lacks a permission this needs; `detail` names it",
        "404" => {
            "There is no such resource (a path id that is not a whole number from 1 to \
             2^53 − 1 names none; `errors` then names it)"
        }
        "409" => "The request conflicts with the current state; `detail` says how",
        "413" => return Some(format!("The request body is over {MAX_BODY_BYTES} bytes")),
        "414" => {
            return Some(format!(
                "The request target (path and query string) is over {MAX_URI_BYTES} bytes"
            ));
        }
        "415" => "The request body is not `application/json`",
        "429" => "Too many requests of this kind are waiting; see `Retry-After`",
        _ => return None,
    };
    Some(text.to_string())
}

/// A problem+json response with the standard description.
fn problem(status: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(error_description(status).unwrap_or_default())
        .content(
            "application/problem+json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
        .into()
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Adds the shared error responses and fills every missing description.
fn complete_operation(op: &mut Operation) {
    let has_body = op.request_body.is_some();
    // Query values are checked by the handlers (a 400 naming each);
    // a path id that cannot be one is a 404.
    let has_query = op
        .parameters
        .iter()
        .flatten()
        .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == ParameterIn::Query));
    let responses = &mut op.responses.responses;
    let mut add = |status: &str| {
        responses
            .entry(status.to_string())
            .or_insert_with(|| problem(status));
    };
    if has_body || has_query {
        add("400");
    }
    if has_body {
        add("413");
        add("415");
    }
    // Any request may be sent with an over-long query string.
    add("414");
    for (status, response) in responses.iter_mut() {
        if let RefOr::T(response) = response
            && response.description.is_empty()
        {
            response.description = error_description(status).unwrap_or_default();
        }
    }
}

/// `(operation, response status, link name, target operationId, parameters)`.
type LinkSpec = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The links from what an answer returns to the operations that take it.
const LINKS: &[LinkSpec] = &[
    (
        "create_job",
        "201",
        "GetJob",
        "get_job",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_job",
        "201",
        "UpdateJob",
        "update_job",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_job",
        "201",
        "SetJobEnabled",
        "set_enabled",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_job",
        "201",
        "RunJobOnce",
        "run_once",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_job",
        "201",
        "ListJobRuns",
        "list_runs",
        &[("jobId", "$response.body#/id")],
    ),
    (
        "create_job",
        "201",
        "DeleteJob",
        "delete_job",
        &[("id", "$response.body#/id")],
    ),
    (
        "list_jobs",
        "200",
        "GetFirstJob",
        "get_job",
        &[("id", "$response.body#/items/0/id")],
    ),
    (
        "list_runs",
        "200",
        "GetFirstRun",
        "get_run",
        &[("id", "$response.body#/items/0/id")],
    ),
    (
        "list_runs",
        "200",
        "DeleteFirstRun",
        "delete_run",
        &[("id", "$response.body#/items/0/id")],
    ),
    (
        "create_group",
        "201",
        "DeleteGroup",
        "delete_group",
        &[("code", "$response.body#/code")],
    ),
    (
        "create_api_key",
        "201",
        "RevokeApiKey",
        "revoke_api_key",
        &[("id", "$response.body#/id")],
    ),
    (
        "list_api_keys",
        "200",
        "RevokeFirstApiKey",
        "revoke_api_key",
        &[("id", "$response.body#/0/id")],
    ),
    (
        "list_notifications",
        "200",
        "ReadFirstNotification",
        "read_notification",
        &[("id", "$response.body#/items/0/id")],
    ),
    (
        "list_templates",
        "200",
        "GetFirstTemplate",
        "get_template",
        &[("code", "$response.body#/0/code")],
    ),
    (
        "list_templates",
        "200",
        "UpdateFirstTemplate",
        "update_template",
        &[("code", "$response.body#/0/code")],
    ),
    (
        "create_calendar",
        "201",
        "GetCalendar",
        "get_calendar",
        &[("code", "$response.body#/code")],
    ),
    (
        "create_calendar",
        "201",
        "UpdateCalendar",
        "update_calendar",
        &[("code", "$response.body#/code")],
    ),
    (
        "create_calendar",
        "201",
        "DeleteCalendar",
        "delete_calendar",
        &[("code", "$response.body#/code")],
    ),
    (
        "list_calendars",
        "200",
        "GetFirstCalendar",
        "get_calendar",
        &[("code", "$response.body#/0/code")],
    ),
    (
        "list_settings",
        "200",
        "UpdateFirstSetting",
        "update_setting",
        &[("key", "$response.body#/0/key")],
    ),
];

fn add_links(doc: &mut OpenApi) {
    let mut by_operation: BTreeMap<&str, Vec<&LinkSpec>> = BTreeMap::new();
    for spec in LINKS {
        by_operation.entry(spec.0).or_default().push(spec);
    }
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            let Some(specs) = op
                .operation_id
                .as_deref()
                .and_then(|id| by_operation.get(id))
            else {
                continue;
            };
            for (_, status, name, target, params) in specs.iter().copied() {
                let Some(RefOr::T(response)) = op.responses.responses.get_mut(*status) else {
                    continue;
                };
                let mut link = LinkBuilder::new().operation_id(*target);
                for (param, expression) in params.iter() {
                    link = link.parameter(*param, *expression);
                }
                response.links.insert(name.to_string(), link.build().into());
            }
        }
    }
}

/// Optional query parameters may be sent empty: the server reads a blank
/// value as absent (a form's empty field). utoipa has no field for
/// `allowEmptyValue` (still part of OpenAPI 3.1), so it goes in through
/// the parameter's flattened map.
fn allow_empty_query_values(op: &mut Operation) {
    for param in op.parameters.iter_mut().flatten() {
        let RefOr::T(param) = param else {
            continue;
        };
        if param.parameter_in == ParameterIn::Query && param.required == Required::False {
            param
                .extensions
                .get_or_insert_with(Default::default)
                .insert("allowEmptyValue".into(), true.into());
        }
    }
}

/// A header is text or absent, never `null`: utoipa types an optional
/// header parameter as nullable, which would invite a tester to send a
/// null it cannot encode.
fn headers_are_not_nullable(op: &mut Operation) {
    for param in op.parameters.iter_mut().flatten() {
        let RefOr::T(param) = param else {
            continue;
        };
        if param.parameter_in != ParameterIn::Header {
            continue;
        }
        if let Some(RefOr::T(Schema::Object(object))) = param.schema.as_mut()
            && let SchemaType::Array(types) = &object.schema_type
            && let [only] = types
                .iter()
                .filter(|t| **t != Type::Null)
                .collect::<Vec<_>>()
                .as_slice()
        {
            object.schema_type = SchemaType::Type((*only).clone());
        }
    }
}

/// A body that may be left out (`Option<T>`, which utoipa writes as
/// `oneOf: [T, null]`) is described as `T`, not required: generators type
/// a nullable body as a value they then fail to encode when it is absent
/// (openapi-python-client sends its "unset" marker as JSON).
fn optional_bodies_are_not_nullable(op: &mut Operation) {
    let Some(RefOr::T(body)) = op.request_body.as_mut() else {
        return;
    };
    let mut changed = false;
    for content in body.content.values_mut() {
        let RefOr::T(content) = content else {
            continue;
        };
        let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema else {
            continue;
        };
        let is_null = |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
        let rest: Vec<&RefOr<Schema>> = one_of.items.iter().filter(|s| !is_null(s)).collect();
        if let [only] = rest.as_slice()
            && rest.len() < one_of.items.len()
        {
            let only = (*only).clone();
            content.schema = Some(only);
            changed = true;
        }
    }
    if changed {
        body.required = Some(Required::False);
    }
}

/// The names of the component schemas request bodies use.
fn request_body_schemas(doc: &mut OpenApi) -> Vec<String> {
    let mut names = Vec::new();
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            let Some(RefOr::T(body)) = &op.request_body else {
                continue;
            };
            for content in body.content.values() {
                if let RefOr::T(content) = content
                    && let Some(RefOr::Ref(r)) = &content.schema
                    && let Some(name) = r.ref_location.strip_prefix("#/components/schemas/")
                {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// The component a property refers to, directly or as the items of an
/// array (such as a calendar's `dates`).
fn referenced_component(property: &RefOr<Schema>) -> Option<String> {
    let reference = match property {
        RefOr::Ref(r) => r,
        RefOr::T(Schema::Array(array)) => match &array.items {
            utoipa::openapi::schema::ArrayItems::RefOrSchema(items) => match items.as_ref() {
                RefOr::Ref(r) => r,
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    reference
        .ref_location
        .strip_prefix("#/components/schemas/")
        .map(str::to_string)
}

/// Every request body refuses fields it does not list (a typo such as
/// `retry_count` is a 400, not silently ignored), and so do the objects
/// nested in it: say so.
fn close_request_bodies(doc: &mut OpenApi) {
    let mut pending = request_body_schemas(doc);
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let mut closed = std::collections::BTreeSet::new();
    while let Some(name) = pending.pop() {
        if !closed.insert(name.clone()) {
            continue;
        }
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(&name)
            && object.schema_type == SchemaType::Type(Type::Object)
        {
            object.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
            pending.extend(object.properties.values().filter_map(referenced_component));
        }
    }
}

/// Completes `doc` in place.
pub(crate) fn complete(doc: &mut OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            complete_operation(op);
            allow_empty_query_values(op);
            headers_are_not_nullable(op);
            optional_bodies_are_not_nullable(op);
        }
    }
    close_request_bodies(doc);
    add_links(doc);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_names_an_operation_and_a_response_it_has() {
        let doc = crate::openapi();
        let mut ids = Vec::new();
        let mut linked = 0;
        for item in doc.paths.paths.values() {
            for op in [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                .into_iter()
                .flatten()
            {
                ids.push(op.operation_id.clone().unwrap_or_default());
                for response in op.responses.responses.values() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    assert!(!response.description.is_empty());
                    linked += response.links.len();
                }
            }
        }
        for (from, _, _, to, _) in LINKS {
            assert!(ids.iter().any(|id| id == from), "{from}");
            assert!(ids.iter().any(|id| id == to), "{to}");
        }
        assert_eq!(linked, LINKS.len());
    }
}

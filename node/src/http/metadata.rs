//! The tenant's schema metadata cache (the seed caches table and column metadata for 24
//! hours): the gateway stores a table's metadata by name with a time to live, and the nl2sql
//! contexts of the tenant's users show the entries of the tables they mention while they
//! live ([`engram_storage::schema`]). Every request goes to the tenant's actor through the
//! front door ([`engram_actors::tenant`]), which writes the cache fenced like its shared sets.

use axum::extract::{Path, State};
use axum::response::Response;
use engram_actors::request::tenant::{self, MetadataPut, MetadataRemove};
use engram_actors::user::check_id;
use engram_storage::schema::{MAX_ENTRIES, SchemaEntry};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::shared::shared;
use super::{ApiError, ApiJson, AppState, ErrorBody, ok};
use crate::caller::Caller;

/// Longest metadata entry, in bytes of JSON.
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;
/// Time to live of an entry that names none: the seed's 24 hours.
pub const DEFAULT_TTL_SECONDS: u64 = 24 * 3600;
/// Longest time to live: a week.
pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;

/// A table's metadata to cache.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataBody {
    /// The metadata (columns, types, comments): any JSON, at most 16 KiB.
    #[schema(value_type = Object)]
    pub content: serde_json::Value,
    /// Seconds it is served for, 1 to 604800 (a week); default 86400.
    pub ttl_seconds: Option<u64>,
}

/// A cached entry.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MetadataView {
    /// Name (a table's).
    pub name: String,
    /// The metadata.
    #[schema(value_type = Object)]
    pub content: serde_json::Value,
    /// Stored at (Unix ms).
    pub stored_at: i64,
    /// Served until (Unix ms).
    pub expires_at: i64,
}

impl From<SchemaEntry> for MetadataView {
    fn from(e: SchemaEntry) -> Self {
        MetadataView {
            content: serde_json::from_str(&e.content).unwrap_or(serde_json::Value::Null),
            name: e.name,
            stored_at: e.stored_at.0,
            expires_at: e.expires_at.0,
        }
    }
}

/// The tenant's live entries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MetadataList {
    /// By name.
    pub entries: Vec<MetadataView>,
}

#[utoipa::path(put, path = "/v1/metadata/{name}", tag = "metadata",
    params(("name" = String, Path, description = "Table name")),
    request_body = MetadataBody,
    responses((status = 200, body = MetadataView), (status = 400, body = ErrorBody)))]
/// Caches a table's metadata for the tenant (replacing what the name held); a retry stores
/// the same entry again.
pub async fn put(
    State(s): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<MetadataBody>,
) -> Result<Response, ApiError> {
    check_id("name", &name)?;
    let ttl = body.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ApiError::invalid(format!(
            "invalid ttl_seconds: must be between 1 and {MAX_TTL_SECONDS}"
        )));
    }
    let content = body.content.to_string();
    if content.len() > MAX_CONTENT_BYTES {
        return Err(ApiError::invalid(format!(
            "invalid content: {} bytes of JSON; at most {MAX_CONTENT_BYTES}",
            content.len()
        )));
    }
    let put = MetadataPut {
        name,
        content,
        ttl_ms: ttl as i64 * 1000,
    };
    let Some(entry) = s.ask(&caller, &shared(&caller), put).await? else {
        return Err(ApiError::invalid(format!(
            "invalid name: the tenant already caches {MAX_ENTRIES} entries; delete some first"
        )));
    };
    Ok(ok(MetadataView::from(entry)))
}

#[utoipa::path(get, path = "/v1/metadata", tag = "metadata",
    responses((status = 200, body = MetadataList)))]
/// The tenant's cached metadata still live.
pub async fn list(State(s): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let entries = s
        .ask(&caller, &shared(&caller), tenant::MetadataList)
        .await?;
    Ok(ok(MetadataList {
        entries: entries.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/metadata/{name}", tag = "metadata",
    params(("name" = String, Path, description = "Table name")),
    responses((status = 200, body = MetadataList), (status = 404, body = ErrorBody)))]
/// Removes a cached entry (404 when there is none).
pub async fn remove(
    State(s): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    check_id("name", &name)?;
    let remove = MetadataRemove { name: name.clone() };
    let found = s.ask(&caller, &shared(&caller), remove).await?;
    if !found {
        return Err(ApiError::not_found(format!("no metadata cached as {name}")));
    }
    list(State(s), caller).await
}

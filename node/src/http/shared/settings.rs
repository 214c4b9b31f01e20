//! The tenant's settings of its shared sets over HTTP (admin).

use axum::extract::State;
use axum::response::Response;
use engram_actors::request::tenant::{ReadSettings, WriteSettings};
use engram_storage::shared::{DomainSettings, SharedSettings};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::{ApiError, ApiJson, AppState, ErrorBody, ok};
use super::shared;
use crate::caller::Caller;

/// One domain's SQL cache settings, where they differ from the tenant's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainSettingsView {
    /// Least similarity of a hit, 0.5 to 1.
    pub similarity: Option<f32>,
    /// Seconds an entry is served, 1 to 86,400.
    pub ttl_seconds: Option<u64>,
}

/// The tenant's settings of its shared sets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsView {
    /// Least similarity of a SQL cache hit, 0.5 to 1; default 0.92.
    pub sql_similarity: f32,
    /// Seconds a SQL cache entry is served, 1 to 86,400; default 900.
    pub sql_ttl_seconds: u64,
    /// Per-domain overrides, by domain.
    #[serde(default)]
    pub domains: std::collections::BTreeMap<String, DomainSettingsView>,
    /// Whether examples recorded successful by three distinct keys that are near-duplicates
    /// of approved ones are approved automatically (audited); default false.
    #[serde(default)]
    pub auto_promote: bool,
    /// Whether a cached SQL answers only questions with the same numbers and time expressions
    /// as its own ("last week" is not "last month"); default true.
    #[serde(default = "yes")]
    pub literal_guard: bool,
}

fn yes() -> bool {
    true
}

/// A settings change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsBody {
    /// Idempotency key.
    pub request_id: String,
    /// The settings.
    pub settings: SettingsView,
}

impl From<SharedSettings> for SettingsView {
    fn from(s: SharedSettings) -> Self {
        SettingsView {
            sql_similarity: s.sql_similarity,
            sql_ttl_seconds: (s.sql_ttl_ms / 1000) as u64,
            domains: s
                .domains
                .into_iter()
                .map(|(domain, d)| {
                    let view = DomainSettingsView {
                        similarity: d.similarity,
                        ttl_seconds: d.ttl_ms.map(|ms| (ms / 1000) as u64),
                    };
                    (domain, view)
                })
                .collect(),
            auto_promote: s.auto_promote,
            literal_guard: s.literal_guard,
        }
    }
}

fn seconds_to_ms(field: &str, seconds: u64) -> Result<i64, ApiError> {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .ok_or_else(|| ApiError::invalid(format!("invalid {field}: too large")))
}

impl SettingsView {
    fn stored(self) -> Result<SharedSettings, ApiError> {
        let mut domains = std::collections::BTreeMap::new();
        for (domain, d) in self.domains {
            let ttl_ms = d
                .ttl_seconds
                .map(|s| seconds_to_ms("domains.ttl_seconds", s))
                .transpose()?;
            domains.insert(
                domain,
                DomainSettings {
                    similarity: d.similarity,
                    ttl_ms,
                },
            );
        }
        Ok(SharedSettings {
            sql_similarity: self.sql_similarity,
            sql_ttl_ms: seconds_to_ms("sql_ttl_seconds", self.sql_ttl_seconds)?,
            domains,
            auto_promote: self.auto_promote,
            literal_guard: self.literal_guard,
        })
    }
}

#[utoipa::path(get, path = "/v1/admin/shared/settings", tag = "shared",
    responses((status = 200, body = SettingsView)))]
/// The tenant's settings of its shared sets (admin).
pub async fn read_settings(
    State(s): State<AppState>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let settings = s.ask(&caller, &shared(&caller), ReadSettings).await?;
    Ok(ok(SettingsView::from(settings)))
}

#[utoipa::path(put, path = "/v1/admin/shared/settings", tag = "shared",
    request_body = SettingsBody,
    responses((status = 200, body = SettingsView), (status = 400, body = ErrorBody)))]
/// Replaces the tenant's settings of its shared sets: SQL cache thresholds and lifetimes per
/// tenant and domain, and auto-promotion of examples (admin).
pub async fn write_settings(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SettingsBody>,
) -> Result<Response, ApiError> {
    let settings = body.settings.stored()?;
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            WriteSettings {
                request_id: body.request_id,
                settings,
            },
        )
        .await?;
    Ok(ok(SettingsView::from(ack.settings)))
}

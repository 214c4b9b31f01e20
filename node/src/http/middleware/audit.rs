//! The audit middleware: serves an audited request, then records its entry (the caller, the
//! user its handler named, the route's action from the route table, the ids its path names,
//! the outcome) and, unless the entry may be batched, waits for it to be durable before
//! answering. It never reads a request's query string or body; the trail's writer is
//! [`crate::audit`].

use std::collections::HashMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::audit::{AuditIds, SensitiveRead};
use crate::caller::Caller;
use crate::http::{ApiError, AppState};

/// The ids a request names in its path (memory, session, key, review flag), never content.
fn path_ids(params: &HashMap<String, String>) -> Vec<String> {
    ["memory_id", "session_id", "key_id", "flag_id", "example_id"]
        .iter()
        .filter_map(|name| params.get(*name).map(|v| format!("{name}={v}")))
        .collect()
}

/// The middleware of a route whose entries record `action`: serves the request, then records
/// it and waits for the entry to be durable before answering (503 if it cannot be), except
/// masked gateway reads that showed nothing sensitive when reads are batched: those are
/// queued and answered at once.
///
/// The entry names the user the handler named ([`crate::caller::AuditedUser`]); a request
/// refused before its handler ran (a body or query that does not decode) names the `{user}`
/// of its path, if it has one.
pub async fn record(
    State((s, action)): State<(AppState, &'static str)>,
    params: Result<Path<HashMap<String, String>>, PathRejection>,
    request: Request,
    next: Next,
) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let params = params.map(|Path(p)| p).unwrap_or_default();
    let response = next.run(request).await;
    let user = caller.audited.get().or_else(|| params.get("user").cloned());
    let mut ids = path_ids(&params);
    if let Some(AuditIds(more)) = response.extensions().get::<AuditIds>() {
        ids.extend(more.iter().cloned());
    }
    let entry = s.audit.entry(
        &caller,
        user.as_deref(),
        action,
        ids,
        response.status().as_u16(),
    );
    let sensitive = response.extensions().get::<SensitiveRead>().is_some();
    if s.audit.batches(caller.scope, action, sensitive) {
        s.audit.append_batched(entry).await;
        return response;
    }
    // A refused request changed nothing: its answer stands even when its audit entry cannot
    // be written (a full disk refuses both).
    if s.audit.append(entry).await || !response.status().is_success() {
        response
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "audit_unavailable",
            "the audit trail cannot be written; the request's effects stand, retry it with \
             the same request id to get its answer",
        )
        .into_response()
    }
}

/// Records a request refused for its scope (the caller is known, the action was not done);
/// `action` is the route's (`unknown` for a route that is not audited).
pub async fn record_refusal(
    s: &AppState,
    caller: &Caller,
    action: Option<&'static str>,
    status: StatusCode,
) {
    let entry = s.audit.entry(
        caller,
        None,
        action.unwrap_or("unknown"),
        Vec::new(),
        status.as_u16(),
    );
    if !s.audit.append(entry).await {
        tracing::warn!("a refused request could not be audited");
    }
}

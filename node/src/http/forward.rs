//! Any node accepts any request: a request for a user whose shard another node holds is handed
//! to that node's shard region over the cluster transport and its answer relayed. While the
//! shard is moving (no owner yet, or the owner just lost it) or its owner does not answer,
//! the request waits up to `cluster.handoff-wait`, polling, and then gets 503 `not_owner`
//! with Retry-After: requests
//! are buffered within a bound, never dropped silently, and a retry with the same request id
//! has exactly-once effects.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engram_actors::placement::UserKey;

use super::{ApiError, AppState, body_user, query_user};
use crate::auth::Caller;
use crate::cluster::{Forwarded, ForwardedMark, into_response};

/// The least time one forward attempt is given, even near the end of the wait.
const MIN_FORWARD: Duration = Duration::from_millis(500);
/// How often a waiting request looks for the shard's owner again.
const POLL: Duration = Duration::from_millis(50);

/// Serves the request here if this node holds the user's shard, else forwards it to the owner.
pub async fn to_owner(
    State(s): State<AppState>,
    params: Result<Path<HashMap<String, String>>, PathRejection>,
    request: Request,
    next: Next,
) -> Response {
    let services = s.directory.services();
    let (Some(transport), Some(ownership)) = (&s.cluster, &services.ownership) else {
        return next.run(request).await;
    };
    if request.extensions().get::<ForwardedMark>().is_some() {
        // Forwarded once already: served here or refused, never forwarded on.
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        // Unauthenticated requests never reach here; nothing to route by.
        return next.run(request).await;
    };
    let in_path = params
        .ok()
        .and_then(|Path(p)| p.get("user").cloned())
        .or_else(|| query_user(request.uri().query()));
    let shard_of =
        |user: &str| UserKey::new(caller.tenant.as_str(), user).shard(services.settings.shards);
    if let Some(user) = &in_path
        && ownership.lease(shard_of(user)).is_ok()
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, s.max_body_bytes).await else {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("body over {} bytes", s.max_body_bytes),
        )
        .into_response();
    };
    // The seed API's `POST /write` names the user in its body.
    let Some(user) = in_path.or_else(|| body_user(&bytes)) else {
        // No user to route by: the handler answers (with its own 400 if need be).
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let shard = shard_of(&user);
    let forwarded = envelope_of(&parts, &caller, &bytes);
    let deadline = Instant::now() + s.handoff_wait;
    loop {
        if ownership.lease(shard).is_ok() {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        if let Some(owner) = ownership.owner(shard).filter(|o| o != ownership.node()) {
            // An owner that does not answer within the wait (partitioned, or its session
            // broke without TCP noticing) costs the caller at most the wait.
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_FORWARD);
            match transport.forward(&owner, &forwarded, left).await {
                // The owner lost the shard meanwhile: look again.
                Ok(reply) if reply.status == 503 && is_not_owner(&reply.body) => {}
                Ok(reply) => return into_response(reply),
                Err(err) => {
                    transport
                        .metrics
                        .forward_failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(shard, owner = %owner, error = %err, "forward failed");
                }
            }
        }
        if Instant::now() >= deadline {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_owner",
                format!(
                    "shard {shard} has no reachable owner yet (it is moving); retry with the \
                     same request id"
                ),
            )
            .into_response();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The envelope of a request to forward: method, path and query, the caller, the headers the
/// owner's handlers read (content type, `Idempotency-Key`) and the body.
fn envelope_of(parts: &axum::http::request::Parts, caller: &Caller, body: &[u8]) -> Forwarded {
    let header = |name: &str| parts.headers.get(name).map(|v| v.as_bytes().to_vec());
    Forwarded {
        method: parts.method.to_string(),
        uri: parts
            .uri
            .path_and_query()
            .map(ToString::to_string)
            .unwrap_or_default(),
        caller: caller.clone(),
        content_type: header(axum::http::header::CONTENT_TYPE.as_str())
            .and_then(|v| String::from_utf8(v).ok()),
        idempotency_key: header(crate::cluster::IDEMPOTENCY_KEY),
        body: body.to_vec(),
    }
}

fn is_not_owner(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("code").and_then(|c| c.as_str()) == Some("not_owner"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_the_idempotency_key_and_the_owner_gets_it_back() {
        let caller = Caller {
            principal: "0123456789abcdef".into(),
            scope: engram_storage::access::Scope::Gateway,
            root: false,
            tenant: "acme".into(),
            client: None,
        };
        let request = axum::http::Request::builder()
            .method("DELETE")
            .uri("/v1/users/alice/sessions/s1/memory")
            .header("idempotency-key", "clear-s1-once")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let envelope = envelope_of(&parts, &caller, b"");
        assert_eq!(
            envelope.idempotency_key.as_deref(),
            Some(&b"clear-s1-once"[..])
        );
        let decoded: Forwarded =
            crate::cluster::decode(&crate::cluster::encode(&envelope)).unwrap();
        assert_eq!(decoded, envelope);
    }
}

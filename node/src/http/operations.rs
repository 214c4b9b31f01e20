//! Operations endpoints: liveness, readiness, metrics, and the cluster's status and drain.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::wire::{ClusterStatus, DrainBody, DrainResponse, LeaseView, MemberView, PipelineStatus};
use super::{ApiError, AppState, ErrorBody, ok, optional_json};

#[utoipa::path(get, path = "/health", tag = "operations", responses((status = 200, description = "The process is up")))]
/// Liveness: the process answers.
pub async fn health() -> Response {
    ok(serde_json::json!({ "status": "ok" }))
}

#[utoipa::path(get, path = "/ready", tag = "operations", responses((status = 200, description = "Storage answers"), (status = 503, body = ErrorBody)))]
/// Readiness: storage answers a read.
pub async fn ready(State(s): State<AppState>) -> Response {
    match s.admin.members().await {
        Ok(_) => ok(serde_json::json!({ "status": "ready" })),
        Err(err) => {
            tracing::warn!(%err, "readiness check failed");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "storage does not answer",
            )
            .into_response()
        }
    }
}

#[utoipa::path(get, path = "/v1/cluster/status", tag = "operations",
    responses((status = 200, body = ClusterStatus), (status = 503, body = ErrorBody)))]
/// The cluster as storage records it: members with their liveness and shard counts, and every
/// shard's lease (owner and epoch), plus what this node serves.
pub async fn cluster_status(State(s): State<AppState>) -> Result<Response, ApiError> {
    let (members, leases) = s.admin.members_and_leases().await?;
    let now = s.admin.now();
    let owned = |node: &str| {
        leases
            .iter()
            .filter(|(_, l)| l.owner.as_deref() == Some(node))
            .count()
    };
    Ok(ok(ClusterStatus {
        node: s.admin.node(),
        shards: s.admin.shards(),
        held: s.admin.held(),
        members: members
            .iter()
            .map(|m| MemberView {
                node_id: m.node_id.clone(),
                http_addr: m.http_addr.clone(),
                status: format!("{:?}", m.status).to_lowercase(),
                heartbeat_age_ms: now.0.saturating_sub(m.heartbeat_at.0),
                live: engram_actors::cluster::is_live(m, now, s.lease_timeout),
                shards: owned(&m.node_id),
            })
            .collect(),
        leases: leases
            .iter()
            .map(|(shard, l)| LeaseView {
                shard: *shard,
                owner: l.owner.clone(),
                epoch: l.epoch,
            })
            .collect(),
    }))
}

#[utoipa::path(get, path = "/v1/cluster/pipeline", tag = "operations",
    responses((status = 200, body = PipelineStatus), (status = 503, body = ErrorBody)))]
/// The inference pipeline of this node: the embeddings still pending for the shards it
/// serves (counted in storage now) and what its dispatcher did since it started. An operator
/// (or a benchmark) waits for `pending_entries` to reach 0 to know the writes are embedded.
pub async fn pipeline(State(s): State<AppState>) -> Result<Response, ApiError> {
    let node = s.admin.node();
    let Some(pipeline) = s.admin.pipeline().await? else {
        return Ok(ok(PipelineStatus {
            node,
            enabled: false,
            pending_users: 0,
            pending_entries: 0,
            oldest_pending_age_ms: 0,
            stored: 0,
            dropped: 0,
        }));
    };
    let pending = pipeline.pending;
    let now = s.admin.now();
    Ok(ok(PipelineStatus {
        node,
        enabled: true,
        pending_users: pending.users,
        pending_entries: pending.entries,
        oldest_pending_age_ms: pending.oldest.map_or(0, |t| (now.0 - t.0).max(0)),
        stored: pipeline.stored,
        dropped: pipeline.dropped,
    }))
}

#[utoipa::path(post, path = "/v1/cluster/drain", tag = "operations",
    request_body = DrainBody,
    responses((status = 202, body = DrainResponse), (status = 404, body = ErrorBody)))]
/// Drains a node (this one unless the body names another): it hands off every shard to the
/// other nodes, then exits. Requests keep being served throughout (forwarded to the new
/// owners).
pub async fn drain(
    State(s): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let me = s.admin.node();
    let body: DrainBody = optional_json(&body, "drain")?;
    let node = body.node_id.unwrap_or(me);
    let member = s.admin.request_drain(&node).await?;
    match member {
        Some(member) => Ok((
            StatusCode::ACCEPTED,
            axum::Json(DrainResponse {
                node_id: member.node_id,
                status: "draining".to_owned(),
            }),
        )
            .into_response()),
        None => Err(ApiError::not_found(format!(
            "no active member {node} (it may have left already)"
        ))),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format")))]
/// Prometheus metrics.
pub async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.metrics.render_with(
        &s.users,
        s.auth.lookups(),
        s.cluster.as_deref().map(|t| t.metrics.counts()),
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

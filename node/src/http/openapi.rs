//! The OpenAPI document of the gateway, generated from the handlers' annotations and served
//! at `/openapi.json`. A test checks that every documented operation is served.

use axum::Json;
use axum::response::IntoResponse;
use utoipa::OpenApi;

use super::{admin, operations, routes, seed, wire};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Engram",
        description = "Memory service for AI agents: turns in, memory contexts out."
    ),
    paths(
        routes::append_turn,
        routes::feedback,
        routes::context,
        routes::create_memory,
        routes::upsert_memory,
        routes::set_status,
        routes::list_memories,
        routes::search,
        routes::list_sessions,
        routes::session_memory,
        routes::clear_session,
        routes::conflicts,
        routes::forget,
        operations::health,
        operations::ready,
        operations::metrics,
        operations::cluster_status,
        operations::drain,
        seed::sessions,
        seed::session_memory,
        seed::clear_session,
        seed::write,
        seed::recall,
        admin::create_key,
        admin::list_keys,
        admin::rotate_key,
        admin::revoke_key,
        admin::audit,
        admin::approve_sensitive_reads,
        admin::archive,
        admin::match_anchor,
    ),
    components(schemas(
        wire::ErrorBody,
        wire::TurnBody,
        wire::ChoiceBody,
        wire::TurnResponse,
        wire::MemoryChangeView,
        wire::FeedbackBody,
        wire::FeedbackResponse,
        wire::ContextBody,
        wire::ContextResponse,
        wire::ContextTurnView,
        wire::ContextSummaryView,
        wire::ContextMemoryView,
        wire::MemoryBody,
        wire::StatusBody,
        wire::MemoryView,
        wire::MemoryResponse,
        wire::MemoriesResponse,
        wire::SearchBody,
        wire::SearchHitView,
        wire::SearchResponse,
        wire::ClusterStatus,
        wire::DrainBody,
        wire::DrainResponse,
        wire::MemberView,
        wire::LeaseView,
        wire::SessionView,
        wire::SessionsResponse,
        wire::TurnView,
        wire::SessionMemoryResponse,
        wire::DeletedResponse,
        wire::ForgetResponse,
        wire::ConflictView,
        wire::ConflictsResponse,
        seed::WriteBody,
        seed::WriteResponse,
        seed::IntentView,
        seed::RecallResponse,
        wire::admin::KeyBody,
        wire::admin::RotateBody,
        wire::admin::KeyView,
        wire::admin::NewKeyResponse,
        wire::admin::KeysResponse,
        wire::admin::AuditView,
        wire::admin::AuditResponse,
        wire::admin::ApprovalResponse,
        wire::admin::AnchorBody,
        wire::admin::AnchorResponse,
        wire::admin::ArchivedTurnView,
        wire::admin::ArchiveNext,
        wire::admin::ArchiveResponse,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// Declares the bearer API key scheme.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key, `egk_<id>_<secret>`, of scope gateway, operator or admin",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /openapi.json`.
pub async fn document() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

//! The route table: every endpoint of the gateway, once, with what it needs ([`Access`]) and
//! the action its audit entries record. The method and the path of an entry come from its
//! handler's `#[utoipa::path]` annotation (through `utoipa_axum::routes!`), so the router,
//! the access rules, the audit actions and the OpenAPI document are all generated from this
//! one list and cannot disagree.
//!
//! This module does not say what a scope may do ([`crate::auth`]), how a request is
//! authenticated or audited ([`super::middleware`]), nor what a handler does.

use std::sync::Arc;

use axum::http::Method;
use axum::middleware;
use axum::routing::{MethodRouter, get};
use axum::{Json, Router};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use utoipa::openapi::OpenApi;
use utoipa::openapi::path::{Operation, Paths};
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa_axum::router::UtoipaMethodRouter;
use utoipa_axum::routes;

use super::rules::{Rule, Rules};
use super::{
    ApiError, AppState, Limits, admin, console, metadata, openapi, operations, routes as v1, seed,
    shared,
};
use crate::auth::Access::{self, Admin, Gateway, Operator, Public};

/// The path of the OpenAPI document, served beside the table's routes (public, not audited,
/// and not in the document it serves). The web console's page and files
/// ([`console::PATHS`]) are served beside them the same way.
pub const DOCUMENT: &str = "/openapi.json";

/// The gateway's routes.
pub fn table() -> Vec<Route> {
    vec![
        Route::new(routes!(v1::append_turn), Gateway, "turn.append"),
        Route::new(routes!(v1::feedback), Gateway, "feedback.write"),
        Route::new(routes!(v1::context), Gateway, "context.read"),
        Route::new(routes!(v1::create_memory), Gateway, "memory.write"),
        Route::new(routes!(v1::list_memories), Gateway, "memory.list"),
        Route::new(routes!(v1::search), Gateway, "memory.search"),
        Route::new(routes!(v1::upsert_memory), Gateway, "memory.write"),
        Route::new(routes!(v1::set_status), Gateway, "memory.status"),
        Route::new(routes!(v1::list_sessions), Gateway, "session.list"),
        Route::new(routes!(v1::session_memory), Gateway, "session.read"),
        Route::new(routes!(v1::clear_session), Gateway, "session.clear"),
        Route::new(routes!(v1::conflicts), Gateway, "conflict.list"),
        Route::new(routes!(v1::resolve_conflict), Gateway, "conflict.resolve"),
        Route::new(routes!(v1::forget), Admin, "user.forget"),
        Route::new(routes!(admin::match_anchor), Gateway, "anchor.match"),
        Route::new(routes!(metadata::put), Gateway, "metadata.write"),
        Route::new(routes!(metadata::list), Gateway, "metadata.list"),
        Route::new(routes!(metadata::remove), Gateway, "metadata.delete"),
        Route::new(routes!(seed::sessions), Gateway, "session.list"),
        Route::new(routes!(seed::session_memory), Gateway, "session.read"),
        Route::new(routes!(seed::clear_session), Gateway, "session.clear"),
        Route::new(routes!(seed::write), Gateway, "memory.write"),
        Route::new(routes!(seed::recall), Gateway, "memory.search"),
        Route::new(routes!(seed::prewarm), Gateway, "user.prewarm"),
        Route::new(routes!(shared::sql_lookup), Gateway, "sqlcache.lookup"),
        Route::new(routes!(shared::sql_put), Gateway, "sqlcache.write"),
        Route::new(
            routes!(shared::sql_invalidate),
            Gateway,
            "sqlcache.invalidate",
        ),
        Route::new(
            routes!(shared::examples::record_example),
            Gateway,
            "fewshot.record",
        ),
        Route::new(
            routes!(shared::examples::search_examples),
            Gateway,
            "fewshot.search",
        ),
        Route::new(
            routes!(shared::examples::example_failed),
            Gateway,
            "fewshot.failure",
        ),
        Route::new(
            routes!(shared::examples::list_examples),
            Admin,
            "fewshot.list",
        ),
        Route::new(
            routes!(shared::examples::approve_example),
            Admin,
            "fewshot.approve",
        ),
        Route::new(
            routes!(shared::examples::reject_example),
            Admin,
            "fewshot.reject",
        ),
        Route::new(
            routes!(shared::examples::edit_example),
            Admin,
            "fewshot.edit",
        ),
        Route::new(
            routes!(shared::examples::export_examples),
            Admin,
            "fewshot.export",
        ),
        Route::new(
            routes!(shared::examples::import_examples),
            Admin,
            "fewshot.import",
        ),
        Route::new(
            routes!(shared::settings::read_settings),
            Admin,
            "shared.settings.read",
        ),
        Route::new(
            routes!(shared::settings::write_settings),
            Admin,
            "shared.settings.write",
        ),
        Route::new(routes!(admin::create_key), Admin, "key.create"),
        Route::new(routes!(admin::list_keys), Admin, "key.list"),
        Route::new(routes!(admin::rotate_key), Admin, "key.rotate"),
        Route::new(routes!(admin::revoke_key), Admin, "key.revoke"),
        Route::new(routes!(admin::audit), Admin, "audit.read"),
        Route::new(routes!(admin::list_users), Admin, "user.list"),
        Route::new(routes!(admin::list_notices), Admin, "notice.list"),
        Route::new(
            routes!(admin::approve_sensitive_reads),
            Admin,
            "breaker.approve",
        ),
        Route::new(routes!(admin::archive), Admin, "archive.read"),
        Route::new(routes!(admin::match_archive), Admin, "archive.match"),
        Route::new(
            routes!(operations::cluster_status),
            Operator,
            "cluster.status",
        ),
        Route::new(routes!(operations::pipeline), Operator, "cluster.pipeline"),
        Route::new(routes!(operations::drain), Operator, "cluster.drain"),
        Route::public(routes!(operations::health)),
        Route::public(routes!(operations::ready)),
        Route::public(routes!(operations::metrics)),
    ]
}

/// One entry of the table: a handler, as its annotation documents it, and its rule.
pub struct Route {
    /// The handler's documented path and method(s) with its operation.
    paths: Paths,
    /// The schemas its operation refers to.
    schemas: Vec<(String, RefOr<Schema>)>,
    /// The handler, on its method(s).
    handler: MethodRouter<AppState>,
    /// What it needs and what it records.
    pub rule: Rule,
}

impl Route {
    /// An authenticated route, audited as `action`.
    fn new(
        (schemas, paths, handler): UtoipaMethodRouter<AppState>,
        access: Access,
        action: &'static str,
    ) -> Route {
        let rule = Rule {
            access,
            action: Some(action),
        };
        Route {
            paths,
            schemas,
            handler,
            rule,
        }
    }

    /// A public route (a probe): neither authenticated nor audited.
    fn public((schemas, paths, handler): UtoipaMethodRouter<AppState>) -> Route {
        let rule = Rule {
            access: Public,
            action: None,
        };
        Route {
            paths,
            schemas,
            handler,
            rule,
        }
    }

    /// The (method, path template) pairs it serves, with their documented operations.
    pub fn operations(&self) -> Vec<(Method, &str, &Operation)> {
        let mut found = Vec::new();
        for (path, item) in &self.paths.paths {
            let methods = [
                (Method::GET, &item.get),
                (Method::PUT, &item.put),
                (Method::POST, &item.post),
                (Method::DELETE, &item.delete),
                (Method::OPTIONS, &item.options),
                (Method::HEAD, &item.head),
                (Method::PATCH, &item.patch),
                (Method::TRACE, &item.trace),
            ];
            for (method, operation) in methods {
                if let Some(operation) = operation {
                    found.push((method, path.as_str(), operation));
                }
            }
        }
        found
    }

    /// Whether it is shed under load and counted against the in-flight limit: the API
    /// routes (gateway and admin keys) are; probes and cluster operations never are, so that
    /// an overloaded node can still be watched and drained.
    fn shed(&self) -> bool {
        matches!(self.rule.access, Gateway | Admin)
    }
}

impl Rules {
    /// The rules of `table`, and those of the document and the console's files (public).
    pub fn of(table: &[Route]) -> Rules {
        let mut rules = Rules::default();
        let public = Rule {
            access: Public,
            action: None,
        };
        for path in std::iter::once(DOCUMENT).chain(console::PATHS) {
            rules.insert(Method::GET, path, public);
        }
        for route in table {
            for (method, path, _) in route.operations() {
                rules.insert(method, path, route.rule);
            }
        }
        rules
    }
}

/// The OpenAPI document of `table`: [`openapi::ApiDoc`] (information, schemas, security)
/// with every route's operation and the schemas it refers to.
pub fn document(table: &[Route]) -> OpenApi {
    let mut doc = openapi::base();
    for route in table {
        doc.paths.merge(route.paths.clone());
        doc.components
            .get_or_insert_with(Default::default)
            .schemas
            .extend(route.schemas.iter().cloned());
    }
    doc
}

/// The router of `table`, layered as the gateway needs: authentication on every route (by
/// the rules of the table), the audit trail on the audited ones, load shedding and the
/// in-flight limit on the API routes, metrics and the body limit on everything.
pub fn router(table: Vec<Route>, state: AppState, limits: Limits) -> Router {
    let rules = Arc::new(Rules::of(&table));
    let doc = Arc::new(document(&table));
    let (mut api, mut direct) = (Router::new(), Router::new());
    for route in table {
        let shed = route.shed();
        let Route {
            paths,
            handler,
            rule,
            ..
        } = route;
        let handler = match rule.action {
            Some(action) => handler.route_layer(middleware::from_fn_with_state(
                (state.clone(), action),
                super::middleware::audit::record,
            )),
            None => handler,
        };
        // One path per annotation; an entry documenting several would be served on each.
        for path in paths.paths.keys() {
            if shed {
                api = api.route(path, handler.clone());
            } else {
                direct = direct.route(path, handler.clone());
            }
        }
    }
    let api = api.layer(
        ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(
                |_: tower::BoxError| async { ApiError::overloaded() },
            ))
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight)),
    );
    Router::new()
        .merge(api)
        .merge(direct)
        .route(
            DOCUMENT,
            get(move || async move { Json(doc.as_ref().clone()) }),
        )
        .merge(console::router())
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), rules),
            super::middleware::auth::authenticate,
        ))
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") })
        .layer(axum::extract::DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            super::middleware::metrics::track,
        ))
        .layer(middleware::from_fn(seed::error_envelope))
        .with_state(state)
}

#[cfg(test)]
mod tests;

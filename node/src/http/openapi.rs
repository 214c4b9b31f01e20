//! What the OpenAPI document of the gateway says besides its operations: its information and
//! the bearer scheme. The operations, and the schemas of the wire types they refer to, come
//! from the route table (`table.rs`), which builds the document served at `/openapi.json`;
//! this module lists neither routes nor schemas.

use utoipa::OpenApi;

/// The document without its operations.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Engram",
        description = "Memory service for AI agents: turns in, memory contexts out."
    ),
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

/// The document without its operations, to which the route table adds them.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

//! Errors of the gateway as HTTP: a status, a stable code and a message, as JSON. The actor
//! and storage errors are mapped with exhaustive matches, so a new variant must be placed.
//! Messages of server-side failures say what failed, never memory text.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::wire::ErrorBody;

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with code `invalid_input`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 404 with code `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 503 with code `overloaded` and Retry-After.
    pub fn overloaded() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "the node is at capacity; retry shortly",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let mut response = (
            self.status,
            Json(ErrorBody {
                code: self.code.into(),
                message: self.message,
            }),
        )
            .into_response();
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<engram_actors::Error> for ApiError {
    fn from(err: engram_actors::Error) -> Self {
        use engram_actors::Error as E;
        match err {
            E::InvalidInput { .. } => ApiError::invalid(err.to_string()),
            E::NotFound { .. } => ApiError::not_found(err.to_string()),
            E::Overloaded(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                err.to_string(),
            ),
            E::Unavailable(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                err.to_string(),
            ),
            E::NotOwner(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_owner",
                err.to_string(),
            ),
            E::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", err.to_string()),
            E::ApprovalRequired { reads } => ApiError::new(
                StatusCode::FORBIDDEN,
                "approval_required",
                format!(
                    "{reads} reads of this user's sensitive memories by this key in the window \
                     already; an admin must approve more (POST /v1/admin/users/{{user}}/approvals)"
                ),
            ),
            E::TooLarge(_) => ApiError::new(StatusCode::BAD_REQUEST, "too_large", err.to_string()),
            E::Storage(storage) => storage.into(),
            E::Internal(_) => internal(&err),
        }
    }
}

impl From<engram_storage::Error> for ApiError {
    fn from(err: engram_storage::Error) -> Self {
        use engram_storage::Outcome;
        match err.outcome() {
            Outcome::TooLarge => {
                ApiError::new(StatusCode::BAD_REQUEST, "too_large", err.to_string())
            }
            Outcome::Busy => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "storage is busy; retry with the same request id",
            ),
            Outcome::KeyService => {
                tracing::warn!(error = %err, "key service failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the key service is unavailable; retry with the same request id",
                )
            }
            Outcome::Internal => internal(&err),
        }
    }
}

fn internal(err: &dyn std::error::Error) -> ApiError {
    tracing::error!(error = %err, "request failed");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; it has been logged",
    )
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if let JsonRejection::MissingJsonContentType(_) = rejection {
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                rejection.body_text(),
            );
        }
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "payload_too_large"
        } else {
            "invalid_json"
        };
        let status = if status == StatusCode::PAYLOAD_TOO_LARGE {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::invalid(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid(rejection.body_text())
    }
}

//! Errors of the gateway as HTTP: a status, a stable code and a message, as JSON. The actor
//! and storage errors are mapped with exhaustive matches, so a new variant must be placed.
//! Messages of server-side failures say what failed, never memory text.
//!
//! Answers to bad input name the field and the problem, never the client's value: serde
//! quotes the offending value in its messages ("invalid type: string \"4111...\""), so
//! every decoding error passes through [`without_values`], and a JSON body's error names
//! the field by its path ([`decode_json`]), with map keys a client chose left out.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An error: a stable code and a message saying what was wrong.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable, machine-readable code (`invalid_input`, `invalid_json`, `not_found`,
    /// `payload_too_large`, `overloaded`, `unavailable`, `internal`).
    pub code: String,
    /// What was wrong, for people.
    pub message: String,
}

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

    /// 500 with code `internal` for a blocking task that panicked or was cancelled (logged).
    pub fn from_join(err: &tokio::task::JoinError) -> Self {
        internal(err)
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
            Outcome::Full => {
                tracing::warn!(error = %err, "the store's disk is full");
                ApiError::new(
                    StatusCode::INSUFFICIENT_STORAGE,
                    "storage_full",
                    "the store's disk is full: nothing of this request was written; retry with \
                     the same request id once space is freed",
                )
            }
            Outcome::Io => {
                tracing::warn!(error = %err, "the store's disk failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    "the store's disk failed to write: nothing of this request was \
                     acknowledged; retry with the same request id",
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

/// serde's messages that quote the client's value (or key) right after them; what follows
/// the last `, expected ` (or `, there are no `) is the type's own text.
const QUOTING: [&str; 4] = [
    "invalid type: ",
    "invalid value: ",
    "unknown variant ",
    "unknown field ",
];

/// `message` without the values serde quotes in it: "invalid type: string \"x\", expected
/// a number" becomes "invalid type, expected a number"; messages that quote nothing of the
/// client's (missing field, syntax errors) are kept.
pub fn without_values(message: &str) -> String {
    let Some((at, marker)) = QUOTING
        .iter()
        .filter_map(|m| message.find(m).map(|at| (at, *m)))
        .min_by_key(|(at, _)| *at)
    else {
        return message.to_owned();
    };
    let what = marker.trim_end_matches([':', ' ']);
    let rest = &message[at + marker.len()..];
    let cut = [", expected ", ", there are no "]
        .iter()
        .filter_map(|m| rest.rfind(m))
        .max();
    let expected = cut.map_or("", |i| &rest[i..]);
    // An unknown field is named when its name looks like a field name (a typo of ours,
    // `usr`), not when it looks like data (a card number used as a key).
    let name = cut
        .filter(|_| marker == "unknown field ")
        .and_then(|i| rest[..i].strip_prefix('`')?.strip_suffix('`'))
        .filter(|name| shown_segment(name))
        .map(|name| format!(" `{name}`"))
        .unwrap_or_default();
    format!("{}{what}{name}{expected}", &message[..at])
}

/// Whether a path segment may be shown: a field name of ours looks like one, a map key a
/// client chose (a card number, a name) may not.
fn shown_segment(name: &str) -> bool {
    name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The path of a JSON decoding error, as `turns[2].text`; a map key that does not look like
/// a field name is shown as `*`.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(if shown_segment(key) { key } else { "*" });
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// Decodes a JSON body (`what` names it in messages); a 400 `invalid_json` that names the
/// field and the problem, never the value.
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|err| json_error(err.inner(), &field_path(err.path()), what))?;
    deserializer
        .end()
        .map_err(|err| json_error(&err, "", what))?;
    Ok(value)
}

fn json_error(inner: &serde_json::Error, path: &str, what: &str) -> ApiError {
    let full = inner.to_string();
    let position = format!(" at line {} column {}", inner.line(), inner.column());
    let message = without_values(full.strip_suffix(&position).unwrap_or(&full));
    let text = if path.is_empty() {
        format!("invalid {what}: {message}{position}")
    } else {
        format!("invalid field {path} of the {what}: {message}{position}")
    };
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", text)
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
        let text = rejection.body_text();
        // "Cannot parse `key` with value `...` to a `u32`": the value is the client's.
        let text = match text.find(" with value ") {
            Some(at) => format!("{} does not parse", &text[..at]),
            None => without_values(&text),
        };
        ApiError::invalid(text)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid(without_values(&rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::without_values;

    #[test]
    fn serde_messages_lose_the_clients_values_and_keep_what_was_expected() {
        for (message, kept) in [
            (
                r#"invalid type: string "6222020200112233445", expected u64"#,
                "invalid type, expected u64",
            ),
            (
                r#"invalid value: string "x, expected y", expected a date"#,
                "invalid value, expected a date",
            ),
            (
                "unknown variant `6222020200112233445`, expected `like` or `dislike`",
                "unknown variant, expected `like` or `dislike`",
            ),
            (
                "unknown field `usr`, expected `request_id` or `user_text`",
                "unknown field `usr`, expected `request_id` or `user_text`",
            ),
            (
                "unknown field `6222020200112233445`, there are no fields",
                "unknown field, there are no fields",
            ),
            (
                "limit: invalid type: integer `6222020200112233445`, expected u32",
                "limit: invalid type, expected u32",
            ),
            ("missing field `user_text`", "missing field `user_text`"),
            ("recursion limit exceeded", "recursion limit exceeded"),
        ] {
            assert_eq!(without_values(message), kept, "{message}");
        }
    }
}

//! The envelope of a forwarded request: one version byte, then postcard. A build reads only
//! its own version, and a malformed frame is an error, never a panic.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The envelope format this build writes and reads (3: the request carries its
/// `Idempotency-Key`).
const ENVELOPE_VERSION: u8 = 3;

/// The header a body-less write names its request id with; it travels in the envelope.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A request handed to the owner's region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Who asked, as the node that authenticated the request found (peers are trusted: they
    /// share the cluster secret).
    pub caller: crate::auth::Caller,
    /// The content type, if any.
    pub content_type: Option<String>,
    /// The `Idempotency-Key` header, if any (body-less writes name their request id with it,
    /// so a retry through another node stays idempotent).
    pub idempotency_key: Option<Vec<u8>>,
    /// The body.
    pub body: Vec<u8>,
}

/// The owner's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedReply {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`, if any.
    pub retry_after: Option<String>,
    /// The body (JSON).
    pub body: Vec<u8>,
}

/// Why an envelope could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Empty, or written by a build with another format.
    #[error("unknown envelope version {0:?}")]
    Version(Option<u8>),
    /// The payload does not decode.
    #[error("malformed envelope: {0}")]
    Malformed(String),
}

/// `value` as an envelope: the version byte, then postcard.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![ENVELOPE_VERSION];
    // Postcard only fails on types it cannot represent; ours are plain structs.
    out.extend(postcard::to_allocvec(value).unwrap_or_default());
    out
}

/// Reads an envelope written by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, EnvelopeError> {
    match bytes.split_first() {
        Some((&ENVELOPE_VERSION, rest)) => {
            postcard::from_bytes(rest).map_err(|e| EnvelopeError::Malformed(e.to_string()))
        }
        Some((&other, _)) => Err(EnvelopeError::Version(Some(other))),
        None => Err(EnvelopeError::Version(None)),
    }
}

/// `reply` as an HTTP response.
pub fn into_response(reply: ForwardedReply) -> axum::response::Response {
    let mut response = axum::response::Response::new(Body::from(reply.body));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(retry) = reply
        .retry_after
        .and_then(|r| HeaderValue::from_str(&r).ok())
    {
        response.headers_mut().insert(header::RETRY_AFTER, retry);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_bad_frames_are_errors_not_panics() {
        let request = Forwarded {
            method: "POST".into(),
            uri: "/v1/users/alice/turns".into(),
            caller: crate::auth::Caller {
                principal: "0123abcd".into(),
                scope: engram_storage::access::Scope::Gateway,
                root: false,
                tenant: "acme".into(),
                client: Some("10.0.0.1:5000".into()),
            },
            content_type: Some("application/json".into()),
            idempotency_key: Some(b"retry-7".to_vec()),
            body: b"{}".to_vec(),
        };
        let bytes = encode(&request);
        assert_eq!(decode::<Forwarded>(&bytes).unwrap(), request);
        assert!(matches!(
            decode::<Forwarded>(&[]),
            Err(EnvelopeError::Version(None))
        ));
        assert!(matches!(
            decode::<Forwarded>(&[9, 1, 2]),
            Err(EnvelopeError::Version(Some(9)))
        ));
        assert!(matches!(
            decode::<Forwarded>(&bytes[..bytes.len() / 2]),
            Err(EnvelopeError::Malformed(_))
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2_000, ..Default::default() })]

        /// Fuzzing the remote envelope decoder: any frame a peer could send decodes or fails
        /// cleanly, never panicking.
        #[test]
        fn any_frame_decodes_or_fails_cleanly(
            frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            versioned in proptest::prelude::any::<bool>(),
        ) {
            let mut bytes = frame;
            if versioned {
                bytes.insert(0, ENVELOPE_VERSION);
            }
            let _ = decode::<Forwarded>(&bytes);
            let _ = decode::<ForwardedReply>(&bytes);
        }
    }
}

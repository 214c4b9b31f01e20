//! The node's HTTP API as the MCP tools call it: one request with a caller's API key, its
//! answer as JSON, or the API's error (`{"code", "message"}`, read as the gateway's own
//! [`ErrorBody`]) with the HTTP status.
//!
//! Every call is bounded by [`CALL_TIMEOUT`]; a node that cannot be reached, does not answer
//! in time or answers something that is not the API's JSON gives [`Answer::Nothing`]. No
//! call is retried here: the writes carry a `request_id`, so the agent (or its MCP client)
//! retries them safely with the same id.
//!
//! Not here: which endpoint a tool calls (`tools.rs`), nor the connection itself
//! (`connector.rs`). Nothing here logs a request or an answer body, nor a key.

use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::connector::Connector;
use crate::auth::TENANT_HEADER;
use crate::config::{ConfigError, Problem};
use crate::error::{Error, Result};
use crate::http::ErrorBody;

/// How long one call to the node may take, answer included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Who a call acts as: an API key and, for the root key, the tenant it names.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The API key (`egk_<id>_<secret>`), sent as `Authorization: Bearer`.
    pub key: String,
    /// Sent as `x-engram-tenant` when given (the root key names the tenant it acts for).
    pub tenant: Option<String>,
}

impl std::fmt::Debug for Credentials {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// What a call came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A 2xx answer's JSON body.
    Ok(Value),
    /// The API's error: its status, its stable code and its message, and `Retry-After`
    /// (seconds) when the node sent one.
    Api {
        /// HTTP status.
        status: u16,
        /// `invalid_input`, `unauthenticated`, `forbidden`, `not_found`, `rate_limited`, ...
        code: String,
        /// What was wrong, for people.
        message: String,
        /// Seconds to wait before retrying, when the node said.
        retry_after: Option<u64>,
    },
    /// No usable answer: the node could not be reached, did not answer within
    /// [`CALL_TIMEOUT`], or answered something that is not the API's JSON.
    Nothing(String),
}

/// A client of one node's API.
#[derive(Clone)]
pub struct NodeClient {
    /// `scheme://authority[/prefix]`, without a trailing slash.
    base: String,
    http: Client<Connector, Full<Bytes>>,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A command-line option that cannot be used.
pub fn bad_option(option: &'static str, message: String) -> Error {
    Error::Config(ConfigError::Invalid(vec![Problem {
        key: option.into(),
        message,
    }]))
}

impl NodeClient {
    /// A client of the node at `url` (`http://host:port`, or `https://` with `ca`, the PEM
    /// file of the CA that signed the node's certificate).
    ///
    /// # Errors
    /// [`Error::Config`] for a URL that is not `http://` or `https://` with a host, an
    /// `https://` URL without `ca` or a `ca` with an `http://` URL; [`Error::File`] for a CA
    /// file that cannot be used.
    pub fn new(url: &str, ca: Option<&Path>) -> Result<Self> {
        let uri: Uri = url
            .parse()
            .map_err(|e| bad_option("--url", format!("{url:?} is not a URL: {e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(_) | None => {
                return Err(bad_option(
                    "--url",
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
        };
        if uri.authority().is_none() || uri.query().is_some() {
            return Err(bad_option(
                "--url",
                format!("{url:?} names no host, or carries a query"),
            ));
        }
        match (https, ca) {
            (true, None) => {
                return Err(bad_option(
                    "--url",
                    "an https:// URL needs --ca-file, the CA that signed the node's certificate"
                        .to_owned(),
                ));
            }
            (false, Some(_)) => {
                return Err(bad_option(
                    "--ca-file",
                    "is for an https:// --url; this one is http://".to_owned(),
                ));
            }
            (true, Some(_)) | (false, None) => {}
        }
        let connector = Connector::new(ca)?;
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(NodeClient {
            base: url.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// The node's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `method path` (path and query, already encoded) with `body` as JSON, as `who`.
    pub async fn call(
        &self,
        who: &Credentials,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        let Ok(mut bearer) = HeaderValue::from_str(&format!("Bearer {}", who.key)) else {
            return Answer::Api {
                status: 401,
                code: "unauthenticated".to_owned(),
                message: "the API key holds characters a header cannot carry".to_owned(),
                retry_after: None,
            };
        };
        bearer.set_sensitive(true);
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(AUTHORIZATION, bearer);
        if let Some(tenant) = &who.tenant {
            request = request.header(TENANT_HEADER, tenant.as_str());
        }
        let bytes = match body {
            Some(body) => {
                request = request.header(CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = match request.body(Full::new(bytes)) {
            Ok(request) => request,
            Err(e) => return Answer::Nothing(format!("cannot build the request: {e}")),
        };
        match tokio::time::timeout(CALL_TIMEOUT, self.exchange(request)).await {
            Ok(answer) => answer,
            Err(_) => Answer::Nothing(format!(
                "the node did not answer within {} s",
                CALL_TIMEOUT.as_secs()
            )),
        }
    }

    async fn exchange(&self, request: Request<Full<Bytes>>) -> Answer {
        let response = match self.http.request(request).await {
            Ok(response) => response,
            Err(e) => return Answer::Nothing(format!("cannot reach the node: {e}")),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let body = match response.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => return Answer::Nothing(format!("the node's answer broke off: {e}")),
        };
        read_answer(status.as_u16(), retry_after, &body)
    }
}

/// The answer of `status` with `body`.
pub fn read_answer(status: u16, retry_after: Option<u64>, body: &[u8]) -> Answer {
    if (200..300).contains(&status) {
        return match serde_json::from_slice(body) {
            Ok(value) => Answer::Ok(value),
            Err(_) => Answer::Nothing(format!("the node answered {status} without JSON")),
        };
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => Answer::Api {
            status,
            code: error.code,
            message: error.message,
            retry_after,
        },
        Err(_) => Answer::Nothing(format!(
            "the node answered {status} without the API's error body"
        )),
    }
}

/// `s` as one path segment: unreserved characters as they are, every other byte
/// percent-encoded (ids are letters, digits and `-_.:@`; anything else the node refuses,
/// and it must reach the node intact to be refused by name).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query string (`?a=1&b=2`, or empty) of the pairs that have a value.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut out = String::new();
    for (name, value) in pairs {
        let Some(value) = value else { continue };
        out.push(if out.is_empty() { '?' } else { '&' });
        out.push_str(name);
        out.push('=');
        out.push_str(&segment(value));
    }
    out
}

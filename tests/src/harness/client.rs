//! A small HTTP/1.1 client for the gateway, and the `must_*` helpers the suites call.
//!
//! It is hyper-util's pooled client (hyper is already in the tree through axum, so this adds
//! two tiny crates, not an HTTP stack with URL parsing and IDNA tables). `https://` goes
//! through tokio-rustls, trusting only the CA a test names ([`HttpClient::trusting`]): no
//! system roots. Every request has a deadline, so a hung node fails a test
//! instead of hanging it. Transport failures are values ([`HttpError`]) that say whether the
//! request can have reached the node: chaos tests need exactly that distinction.
//!
//! The `must_*` helpers follow TiKV's `must_put`: they do one thing, panic with the status
//! and body when it did not work, and return what the caller needs next.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::path::Path;

use super::connector::Connector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Deadline of one request, response body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`HttpClient::must_append_turn`] retries a node that answers 503 `not_owner`.
pub const RETRY_NOT_OWNER_FOR: Duration = Duration::from_secs(60);

/// Why a request got no HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// No connection could be made: the request never reached the node.
    Connect(String),
    /// A connection was made but no complete response came back: the request may or may
    /// not have been handled.
    Transport(String),
    /// No response within the deadline: the request may or may not have been handled.
    Timeout,
}

impl HttpError {
    /// True when the request certainly did not reach the node.
    pub fn is_connect(&self) -> bool {
        matches!(self, HttpError::Connect(_))
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Connect(e) => write!(f, "cannot connect: {e}"),
            HttpError::Transport(e) => write!(f, "no complete response: {e}"),
            HttpError::Timeout => write!(f, "no response within {REQUEST_TIMEOUT:?}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// A response: its status and body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// The body, as received.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The keys a sandbox's clients use: the root admin key its nodes are configured with, and
/// gateway keys made with it on first use, one per store and tenant.
#[derive(Debug)]
pub struct KeyRing {
    root: String,
    gateway: tokio::sync::Mutex<HashMap<(PathBuf, String), String>>,
}

impl KeyRing {
    /// A ring around the root admin key.
    pub fn new(root: String) -> Self {
        KeyRing {
            root,
            gateway: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The root admin key.
    pub fn root(&self) -> &str {
        &self.root
    }
}

/// Which API key a client sends.
#[derive(Debug, Clone)]
enum Auth {
    /// None (to test refusals).
    None,
    /// This token, always.
    Key(String),
    /// As a well-behaved deployment would: the root key for admin and cluster endpoints, a
    /// gateway key of the client's tenant for the rest.
    Ring { ring: Arc<KeyRing>, store: PathBuf },
}

/// A client of one node's gateway; cheap to clone (clones share the connection pool).
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<Connector, Full<Bytes>>,
    base: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    auth: Auth,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A pooled client of the node at `base` (`http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        Self::build(base, usize::MAX, None)
    }

    /// A pooled client of the node at `base` that speaks `https://` (`http://` too), trusting
    /// only the CA certificates of the PEM file `ca`.
    ///
    /// # Panics
    /// If `ca` cannot be read or holds no certificate.
    pub fn trusting(base: &str, ca: &Path) -> Self {
        Self::build(base, usize::MAX, Some(ca))
    }

    /// A client that opens a new connection for every request, so that each request's fate
    /// is its own (no keep-alive connection closed under it by a shutting-down server).
    pub fn fresh_connections(base: &str) -> Self {
        Self::build(base, 0, None)
    }

    fn build(base: &str, idle: usize, ca: Option<&Path>) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = match ca {
            Some(ca) => Connector::trusting(tcp, ca),
            None => Connector::plain(tcp),
        };
        let inner = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(idle)
            .build(connector);
        HttpClient {
            inner,
            base: base.trim_end_matches('/').to_owned(),
            headers: Vec::new(),
            auth: Auth::None,
        }
    }

    /// This client, sending `token` as its API key on every request.
    pub fn with_key(mut self, token: &str) -> Self {
        self.auth = Auth::Key(token.to_owned());
        self
    }

    /// This client, sending no API key.
    pub fn without_key(mut self) -> Self {
        self.auth = Auth::None;
        self
    }

    /// This client, choosing keys from `ring` for the node whose store is `store`: the root
    /// key for `/v1/admin/*`, `/v1/cluster/*` and forgetting a user, a gateway key of its
    /// tenant (made on first use) for everything else.
    pub fn with_ring(mut self, ring: Arc<KeyRing>, store: PathBuf) -> Self {
        self.auth = Auth::Ring { ring, store };
        self
    }

    /// The tenant this client names (`x-engram-tenant`), `default` when none.
    fn tenant(&self) -> String {
        self.headers
            .iter()
            .find(|(name, _)| name.as_str() == "x-engram-tenant")
            .and_then(|(_, value)| value.to_str().ok())
            .unwrap_or("default")
            .to_owned()
    }

    /// The token to send for `method path`, making a gateway key on first use.
    async fn token(&self, method: &Method, path: &str) -> Result<Option<String>, HttpError> {
        let (ring, store) = match &self.auth {
            Auth::None => return Ok(None),
            Auth::Key(token) => return Ok(Some(token.clone())),
            Auth::Ring { ring, store } => (ring, store),
        };
        let user_path = path.split('?').next().unwrap_or_default();
        let forget = method == Method::DELETE
            && user_path.starts_with("/v1/users/")
            && user_path.matches('/').count() == 3;
        if forget || path.starts_with("/v1/admin/") || path.starts_with("/v1/cluster/") {
            return Ok(Some(ring.root.clone()));
        }
        let tenant = self.tenant();
        let mut keys = ring.gateway.lock().await;
        if let Some(token) = keys.get(&(store.clone(), tenant.clone())) {
            return Ok(Some(token.clone()));
        }
        let body = json!({"scope": "gateway", "tenant": tenant, "name": "harness"});
        let reply = self
            .send(
                Method::POST,
                "/v1/admin/keys",
                Some(("application/json", Bytes::from(body.to_string()))),
                Some(&ring.root),
            )
            .await?;
        let token = reply.json()["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                HttpError::Transport(format!(
                    "making a gateway key: {} {}",
                    reply.status,
                    reply.text()
                ))
            })?;
        keys.insert((store.clone(), tenant), token.clone());
        Ok(Some(token))
    }

    /// This client, sending `name: value` with every request (the tenant header, say).
    ///
    /// # Panics
    /// If the name or value is not a valid header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        let name = HeaderName::try_from(name).expect("valid header name");
        let value = HeaderValue::try_from(value).expect("valid header value");
        self.headers.push((name, value));
        self
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `method path` with an optional JSON body, and this client's API key.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, HttpError> {
        let token = self.token(&method, path).await?;
        let body = body.map(|b| ("application/json", Bytes::from(b.to_string())));
        self.send(method, path, body, token.as_deref()).await
    }

    /// Sends `method path` with a body of `content_type` as it is, and this client's API key.
    pub async fn request_raw(
        &self,
        method: Method,
        path: &str,
        content_type: &'static str,
        body: impl Into<Bytes>,
    ) -> Result<Reply, HttpError> {
        let token = self.token(&method, path).await?;
        let body = Some((content_type, body.into()));
        self.send(method, path, body, token.as_deref()).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Bytes)>,
        token: Option<&str>,
    ) -> Result<Reply, HttpError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if let Some(token) = token {
            builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let bytes = match body {
            Some((content_type, bytes)) => {
                builder = builder.header(CONTENT_TYPE, content_type);
                bytes
            }
            None => Bytes::new(),
        };
        let request = builder
            .body(Full::new(bytes))
            .map_err(|e| HttpError::Transport(format!("invalid request: {e}")))?;
        let exchange = async {
            let response = self.inner.request(request).await.map_err(|e| {
                if e.is_connect() {
                    HttpError::Connect(format!("{e:?}"))
                } else {
                    HttpError::Transport(format!("{e:?}"))
                }
            })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| HttpError::Transport(format!("reading the body: {e}")))?
                .to_bytes();
            Ok(Reply { status, body })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .unwrap_or(Err(HttpError::Timeout))
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Reply, HttpError> {
        self.request(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Reply, HttpError> {
        self.request(Method::POST, path, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<Reply, HttpError> {
        self.request(Method::DELETE, path, None).await
    }

    /// Sends a request that must get 200; returns the JSON body.
    ///
    /// # Panics
    /// On a transport failure or any other status, with the body.
    pub async fn must(&self, method: Method, path: &str, body: Option<&Value>) -> Value {
        match self.request(method.clone(), path, body).await {
            Ok(reply) if reply.status == StatusCode::OK => reply.json(),
            Ok(reply) => panic!("{method} {path}: {} {}", reply.status, reply.text()),
            Err(err) => panic!("{method} {path}: {err}"),
        }
    }

    /// `GET path`, which must answer 200 with JSON.
    pub async fn must_get(&self, path: &str) -> Value {
        self.must(Method::GET, path, None).await
    }

    /// `POST path`, which must answer 200 with JSON.
    pub async fn must_post(&self, path: &str, body: &Value) -> Value {
        self.must(Method::POST, path, Some(body)).await
    }

    /// `POST /v1/users/{user}/turns` (see [`turn`]), whatever it answers.
    pub async fn append_turn(&self, user: &str, body: &Value) -> Result<Reply, HttpError> {
        self.post(&format!("/v1/users/{user}/turns"), body).await
    }

    /// Appends a turn (see [`turn`]) to `user`, retrying a 503 `not_owner` with the same body
    /// (the same request id, so at most one turn is written) as the API tells gateways to: a
    /// node whose heartbeat a busy machine delayed refuses writes until it has confirmed its
    /// leases again. It retries for at most [`RETRY_NOT_OWNER_FOR`], then returns what the
    /// last attempt got: any other answer, a transport error, or that `not_owner`.
    pub async fn append_turn_retrying(&self, user: &str, body: &Value) -> Result<Reply, HttpError> {
        let deadline = Instant::now() + RETRY_NOT_OWNER_FOR;
        loop {
            let outcome = self.append_turn(user, body).await;
            match &outcome {
                Ok(reply)
                    if reply.status == StatusCode::SERVICE_UNAVAILABLE
                        && reply.json()["code"] == "not_owner"
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => return outcome,
            }
        }
    }

    /// Appends a turn (see [`turn`]) to `user` that must be acknowledged, retrying a
    /// `not_owner` as [`HttpClient::append_turn_retrying`] does; returns the `TurnResponse`.
    ///
    /// # Panics
    /// On a transport failure, any other status, or a `not_owner` past that time.
    pub async fn must_append_turn(&self, user: &str, body: &Value) -> Value {
        match self.append_turn_retrying(user, body).await {
            Ok(reply) if reply.status == StatusCode::OK => reply.json(),
            Ok(reply) => panic!(
                "POST /v1/users/{user}/turns: {} {}",
                reply.status,
                reply.text()
            ),
            Err(err) => panic!("POST /v1/users/{user}/turns: {err}"),
        }
    }

    /// The memory context for `user`'s next question in `session` on the default route.
    pub async fn must_context(&self, user: &str, session: &str, query: &str) -> Value {
        let body = json!({ "session_id": session, "query": query });
        self.must_post(&format!("/v1/users/{user}/context"), &body)
            .await
    }

    /// Writes a memory record; returns the `MemoryResponse`.
    pub async fn must_create_memory(&self, user: &str, body: &Value) -> Value {
        self.must_post(&format!("/v1/users/{user}/memories"), body)
            .await
    }

    /// Every stored turn of `user`'s `session` (up to the 500 the API returns), oldest first.
    pub async fn must_session_turns(&self, user: &str, session: &str) -> Vec<Value> {
        let memory = self
            .must_get(&format!(
                "/v1/users/{user}/sessions/{session}/memory?limit=500"
            ))
            .await;
        memory["turns"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the node's pipeline has embedded everything pending for its shards (a
    /// condition, polled: however long a busy machine takes). Needs an operator key.
    pub async fn must_drain_pipeline(&self) {
        loop {
            let status = self.must_get("/v1/cluster/pipeline").await;
            if status["pending_entries"] == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The Prometheus text of `/metrics`.
    pub async fn must_metrics(&self) -> String {
        match self.get("/metrics").await {
            Ok(reply) if reply.status == StatusCode::OK => reply.text(),
            Ok(reply) => panic!("GET /metrics: {} {}", reply.status, reply.text()),
            Err(err) => panic!("GET /metrics: {err}"),
        }
    }
}

/// The body of a successful turn on the default route (`nl2sql_query`).
pub fn turn(request_id: &str, session: &str, user_text: &str, assistant_text: &str) -> Value {
    json!({
        "request_id": request_id,
        "session_id": session,
        "route": "nl2sql_query",
        "user_text": user_text,
        "assistant_text": assistant_text,
    })
}

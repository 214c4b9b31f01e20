//! The streamable HTTP endpoint, `POST/GET/DELETE /mcp`: rmcp's `StreamableHttpService`
//! behind a gate that requires an Engram API key on every HTTP request
//! (`Authorization: Bearer egk_...`, and `x-engram-tenant` for the root key).
//!
//! The gate asks the node whether the key is good (`GET /v1/metadata`, which any gateway or
//! admin key may call and which touches no user), remembers a good key for [`KEY_TTL`] by
//! its SHA-256 only, and refuses a missing key with 401 and a key the node refuses with the
//! node's own status and error (401 `unauthenticated`, 403 `forbidden` or `wrong_tenant`,
//! 429 `rate_limited` with `Retry-After`). A good key travels with its request to the
//! tools, which call the node with it: each MCP client acts with its own key and scope, and
//! an MCP session cannot lend one client's key to another's requests. A key the node
//! revokes is refused by the node at the next tool call, whatever the gate remembers.
//!
//! A session belongs to the key that opened it ([`Sessions`]): the gate records the
//! fingerprint of the key (and named tenant) of the `initialize` request whose answer
//! carries a new `Mcp-Session-Id`, and refuses a request on that session with any other key
//! (403 `forbidden`, before the session sees it), and one naming a session it does not know
//! (404 `not_found`, which tells an MCP client to open a new session).
//!
//! Connections are served with a header read timeout (`--header-read-timeout`, 10 s): a
//! client that sends partial headers, or leaves its connection idle between requests, is
//! closed after it (`crate::http::serve`).
//!
//! Not here: the tools (`tools.rs`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use super::client::{Answer, Credentials, NodeClient};
use super::tools::EngramTools;
use crate::auth::TENANT_HEADER;
use crate::error::{Error, Result};

/// The endpoint's path.
pub const PATH: &str = "/mcp";
/// How long the gate remembers a key the node accepted.
pub const KEY_TTL: Duration = Duration::from_secs(60);
/// At most this many keys remembered.
const MAX_REMEMBERED: usize = 1024;
/// At most this much of a refused request's body is read (an MCP message is far smaller).
const DRAIN_LIMIT: usize = 64 * 1024;
/// And for at most this long.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Sessions whose key the gate remembers; beyond, the oldest is forgotten (its client gets
/// 404 and opens a new one).
const MAX_SESSIONS: usize = 10_000;
/// How long a shutdown waits for requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The header naming a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Binds `listen`, says where on stderr, and serves until `stop` completes.
///
/// # Errors
/// [`Error::Io`] when the address cannot be bound or serving fails.
pub async fn serve(
    node: Arc<NodeClient>,
    listen: SocketAddr,
    allowed_hosts: Vec<String>,
    header_read_timeout: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Io {
            step: format!("binding --listen {listen}"),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| Error::Io {
        step: "reading the bound address".to_owned(),
        source,
    })?;
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !bound.ip().is_loopback() && !bound.ip().is_unspecified() {
        hosts.push(bound.ip().to_string());
    }
    hosts.extend(allowed_hosts);
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
    let sessions = config.cancellation_token.clone();
    let tools_node = Arc::clone(&node);
    let service = StreamableHttpService::new(
        move || Ok(EngramTools::new(Arc::clone(&tools_node), None)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let gate = Arc::new(Gate {
        node,
        remembered: Mutex::new(HashMap::new()),
        sessions: Mutex::new(Sessions::default()),
    });
    let app = Router::new()
        .route_service(PATH, service)
        .layer(middleware::from_fn_with_state(gate, authenticate));
    // The line a supervisor (or the tests) waits for: the port is known only now.
    eprintln!("engram-node mcp: listening on http://{bound}{PATH}");
    tracing::info!(%bound, "mcp endpoint listening");
    let stop = async move {
        stop.await;
        sessions.cancel();
    };
    crate::http::serve(listener, app, stop, SHUTDOWN_GRACE, header_read_timeout)
        .await
        .map_err(|source| Error::Io {
            step: "serving the MCP endpoint".to_owned(),
            source,
        })
}

/// The key that opened each MCP session, by its fingerprint ([`Gate::fingerprint`]); at
/// most [`MAX_SESSIONS`], the oldest forgotten first.
#[derive(Default)]
struct Sessions {
    owners: HashMap<String, [u8; 32]>,
    order: VecDeque<String>,
}

impl Sessions {
    fn bind(&mut self, session: &str, owner: [u8; 32]) {
        while self.owners.len() >= MAX_SESSIONS {
            match self.order.pop_front() {
                Some(old) => {
                    self.owners.remove(&old);
                }
                None => break,
            }
        }
        if self.owners.insert(session.to_owned(), owner).is_none() {
            self.order.push_back(session.to_owned());
        }
    }

    fn owner(&self, session: &str) -> Option<[u8; 32]> {
        self.owners.get(session).copied()
    }

    fn close(&mut self, session: &str) {
        if self.owners.remove(session).is_some() {
            self.order.retain(|s| s != session);
        }
    }
}

/// Checks keys with the node, remembering the good ones.
struct Gate {
    node: Arc<NodeClient>,
    /// SHA-256 of key and tenant, and until when it is taken as good.
    remembered: Mutex<HashMap<[u8; 32], Instant>>,
    /// The key each session was opened with.
    sessions: Mutex<Sessions>,
}

impl Gate {
    fn fingerprint(who: &Credentials) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(who.key.as_bytes());
        hash.update([0]);
        hash.update(who.tenant.as_deref().unwrap_or_default().as_bytes());
        hash.finalize().into()
    }

    fn remembers(&self, print: &[u8; 32], now: Instant) -> bool {
        let remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        remembered.get(print).is_some_and(|until| *until > now)
    }

    fn remember(&self, print: [u8; 32], now: Instant) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, until| *until > now);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(print, now + KEY_TTL);
    }

    /// Whether the node takes `who`'s key; the refusal to send back when not.
    async fn check(&self, who: &Credentials) -> Result<(), Response> {
        let print = Self::fingerprint(who);
        if self.remembers(&print, Instant::now()) {
            return Ok(());
        }
        match self.node.call(who, Method::GET, "/v1/metadata", None).await {
            Answer::Ok(_) => {
                self.remember(print, Instant::now());
                Ok(())
            }
            Answer::Api {
                status,
                code,
                message,
                retry_after,
            } => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                let mut response = refusal(status, &code, &message);
                if let Some(wait) = retry_after {
                    response
                        .headers_mut()
                        .insert(RETRY_AFTER, HeaderValue::from(wait));
                }
                Err(response)
            }
            Answer::Nothing(why) => Err(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                &format!("cannot check the API key with the node: {why}"),
            )),
        }
    }
}

/// An error answer in the API's shape, `{"code", "message"}`; a 401 says to send a bearer.
fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({"code": code, "message": message});
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"engram\""),
        );
    }
    response
}

/// Why a request's headers name no usable credentials: the status, code and message.
type Unusable = (StatusCode, &'static str, &'static str);

/// The bearer token and the named tenant of `headers`.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, Unusable> {
    let key = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|token| !token.is_empty())
        .ok_or((
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "send the Engram API key as `Authorization: Bearer egk_...`",
        ))?;
    let tenant = match headers.get(TENANT_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(tenant)) => Some(tenant.to_owned()),
        Some(Err(_)) => {
            return Err((
                StatusCode::BAD_REQUEST,
                "invalid_input",
                "invalid x-engram-tenant: not visible ASCII",
            ));
        }
    };
    Ok(Credentials {
        key: key.to_owned(),
        tenant,
    })
}

async fn authenticate(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    let who = match credentials(request.headers()) {
        Ok(who) => who,
        Err((status, code, why)) => {
            drain(request).await;
            return refusal(status, code, why);
        }
    };
    if let Err(refused) = gate.check(&who).await {
        tracing::info!(status = refused.status().as_u16(), "mcp request refused");
        drain(request).await;
        return refused;
    }
    let print = Gate::fingerprint(&who);
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &session {
        let owner = gate
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .owner(session);
        let refused = match owner {
            Some(owner) if owner == print => None,
            Some(_) => Some(refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this MCP session was opened with another API key; open a session with \
                 your own",
            )),
            None => Some(refusal(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such MCP session; open a new one",
            )),
        };
        if let Some(refused) = refused {
            tracing::info!(
                status = refused.status().as_u16(),
                "mcp request refused: not its session's key"
            );
            drain(request).await;
            return refused;
        }
    }
    let closing = request.method() == Method::DELETE;
    request.extensions_mut().insert(Arc::new(who));
    let response = next.run(request).await;
    let mut sessions = gate.sessions.lock().unwrap_or_else(|e| e.into_inner());
    match &session {
        // A new session: it is the key's that opened it.
        None => {
            if let Some(opened) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                sessions.bind(opened, print);
            }
        }
        Some(session) if closing && response.status().is_success() => sessions.close(session),
        Some(_) => {}
    }
    drop(sessions);
    response
}

/// Reads a refused request's body (up to [`DRAIN_LIMIT`], for [`DRAIN_TIMEOUT`]) before the refusal is sent. A
/// connection closed with request bytes still unread is reset, not closed, and the reset
/// can reach the client before the refusal does: it would see the connection drop, not the
/// 401.
async fn drain(request: Request) {
    let body = axum::body::to_bytes(request.into_body(), DRAIN_LIMIT);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, body).await;
}

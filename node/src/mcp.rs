//! `engram-node mcp`: an MCP server (the Model Context Protocol, on the official Rust SDK,
//! `rmcp`) that lets an agent use a running node's memory as tools: add_turn, get_context,
//! search_memories, write_memory, list_memories, set_memory_status, feedback,
//! list_sessions, recall_intent and forget_user.
//!
//! It is a client of the node's HTTP API (`--url`), not a node: it holds no data and opens
//! no store, and every tool call is one API request made with an API key, so the node's
//! scopes, tenants, rate limits, audit trail and masking apply to agents as to any caller.
//! Two transports:
//! - stdio (the default): the MCP client starts the process; the key comes from
//!   `--api-key-file` (a secret file, mode 0600) or `ENGRAM_API_KEY`, never from a flag
//!   value (`ps` would show it).
//! - streamable HTTP (`--transport http --listen ADDR`): `/mcp` on that address; every HTTP
//!   request carries its own key as `Authorization: Bearer`, which the server checks with the
//!   node and then uses for that request's calls (`mcp/endpoint.rs`).
//!
//! To the node it speaks plain HTTP, or HTTPS verified against `--ca-file` (no system
//! roots: a node's certificate is the operator's own CA's).
//!
//! Not here: the tools (`mcp/tools.rs`), the HTTP requests (`mcp/client.rs`). Nothing logs
//! a key, a user's text or a memory: calls are logged by tool, outcome and duration.

mod client;
mod connector;
mod endpoint;
#[cfg(test)]
mod tests;
mod tools;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt;

pub use self::client::Credentials;
use self::client::NodeClient;
use self::tools::EngramTools;
use crate::error::{Error, Result};

/// The environment variable that may hold the stdio transport's API key.
pub const KEY_ENV: &str = "ENGRAM_API_KEY";

/// How the server meets its MCP client.
#[derive(Debug, Clone)]
pub enum Transport {
    /// JSON-RPC lines on stdin and stdout, acting with one key.
    Stdio {
        /// The key (and tenant) of every call.
        credentials: Credentials,
    },
    /// Streamable HTTP at `http://<listen>/mcp`, each request with its own key.
    Http {
        /// Where to listen (port 0: any free port, printed on stderr).
        listen: SocketAddr,
        /// `Host` names accepted besides loopback and the listen address (the names clients
        /// reach it by; others are refused against DNS rebinding).
        allowed_hosts: Vec<String>,
        /// How long a connection may take to send a request's head (and stay idle between
        /// requests) before it is closed.
        header_read_timeout: std::time::Duration,
    },
}

/// What `engram-node mcp` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The node's base URL.
    pub url: String,
    /// The CA of the node's certificate, for an `https://` URL.
    pub ca_file: Option<std::path::PathBuf>,
    /// The transport.
    pub transport: Transport,
}

/// The stdio transport's key: the contents of `file` (a secret file: owner-only mode),
/// else `ENGRAM_API_KEY`.
///
/// # Errors
/// [`Error::File`] for a key file that cannot be read, is open to others or is empty;
/// [`Error::Secret`] when neither is given.
pub fn api_key(file: Option<&Path>) -> Result<String> {
    const KEY: &str = "--api-key-file";
    if let Some(path) = file {
        let bytes = crate::secret::read(KEY, path)?;
        let key = String::from_utf8(bytes)
            .map(|k| k.trim().to_owned())
            .ok()
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_graphic()))
            .ok_or_else(|| Error::File {
                key: KEY,
                path: path.to_owned(),
                reason: "holds no API key (one line of visible ASCII)".to_owned(),
            })?;
        return Ok(key);
    }
    match std::env::var(KEY_ENV) {
        Ok(key) if !key.trim().is_empty() => Ok(key.trim().to_owned()),
        Ok(_) | Err(_) => Err(Error::Secret(format!(
            "no API key: give --api-key-file (mode 0600) or set {KEY_ENV}"
        ))),
    }
}

/// Serves MCP until the client leaves (stdio: stdin closes) or SIGTERM or Ctrl-C.
///
/// # Errors
/// [`Error::Config`] or [`Error::File`] for unusable options, [`Error::Io`] when the
/// transport fails.
pub async fn serve(options: Options) -> Result<()> {
    let node = Arc::new(NodeClient::new(&options.url, options.ca_file.as_deref())?);
    match options.transport {
        Transport::Stdio { credentials } => {
            tracing::info!(node = node.base(), "mcp over stdio");
            let tools = EngramTools::new(node, Some(credentials));
            let running = tools
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| io_error("starting MCP over stdio", e))?;
            let cancel = running.cancellation_token();
            tokio::select! {
                ended = running.waiting() => {
                    ended.map_err(|e| io_error("serving MCP over stdio", e))?;
                }
                () = stop_signal() => cancel.cancel(),
            }
            Ok(())
        }
        Transport::Http {
            listen,
            allowed_hosts,
            header_read_timeout,
        } => {
            endpoint::serve(
                node,
                listen,
                allowed_hosts,
                header_read_timeout,
                stop_signal(),
            )
            .await
        }
    }
}

fn io_error(step: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        step: step.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Completes at SIGTERM or Ctrl-C (never, when the handlers cannot be installed).
async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

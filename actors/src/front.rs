//! The front door: one typed entry point for everything a user's memory can be asked,
//! [`Users::call`] (or its typed form [`Users::ask`]) with the [`Reader`] asking, the user and
//! a [`UserRequest`], answered by a [`UserReply`].
//!
//! It checks placement once: a user whose shard this node holds is served by the local
//! [`Directory`]; any other is sent, as one versioned frame (a format byte, then postcard),
//! to the owner through a [`PeerLink`] that the node's transport implements, and the owner
//! serves it locally, never forwarding it again. While the shard moves (no owner yet, or the
//! owner lost it meanwhile) the call waits, looking again every [`POLL`], up to the hand-off
//! wait, then fails with [`Error::NotOwner`]: requests are buffered within a bound, never
//! dropped silently, and a retry with the same request id has exactly-once effects.
//!
//! What this module does not do: HTTP, JSON, authentication (the node does those and builds
//! the [`Reader`]). The privacy rules (masking, withholding, the sensitive-read breaker,
//! admin-only requests) are applied by the user's actor ([`crate::user`]), with the reader
//! that travels with every request. A peer is not trusted with the reader it presents: the
//! client's own [`Credential`] travels with it, and the owner's [`CallerCheck`] (the node's
//! key store) must find that the credential is that reader's before anything is served; the
//! user's actor then checks that the reader acts for the user's tenant and may ask what it
//! asks.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::placement::UserKey;
use crate::request::typed;
pub use crate::request::{Ask, Credential, Reader, UserReply, UserRequest};

mod fault;
#[cfg(test)]
mod tests;
mod wire;

pub use fault::FAULT_ENV;

pub use wire::{Fault, PeerCall, decode_call, decode_reply, encode_call, encode_reply};

/// How often a call waiting for a moving shard looks for its owner again.
pub const POLL: Duration = Duration::from_millis(50);
/// The least time one attempt at the owner is given, even near the end of the wait.
const MIN_ATTEMPT: Duration = Duration::from_millis(500);

/// A boxed future of a [`CallerCheck`]'s verdict: why the caller is refused, if it is.
pub type CheckFuture<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<(), String>> + Send + 'a>>;

/// How the owner of a user checks a forwarded request's caller, implemented by the node over
/// its own key store: the reader a peer presents must be what the client's credential proves
/// (the same key, scope and tenant). `Err` names why not, without the credential.
pub trait CallerCheck: Send + Sync + fmt::Debug {
    /// Whether `credential` proves `reader`.
    fn check<'a>(
        &'a self,
        reader: &'a Reader,
        credential: Option<&'a Credential>,
    ) -> CheckFuture<'a>;
}

/// Why a peer link delivered no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// No session with the node (not dialled yet, or down).
    #[error("node {0} is not reachable")]
    Unreachable(String),
    /// The node did not answer in time, or the session broke.
    #[error("node {node} did not answer: {reason}")]
    NoAnswer {
        /// The node.
        node: String,
        /// What happened.
        reason: String,
    },
}

/// A boxed future of a peer link's answer.
pub type LinkFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, LinkError>> + Send + 'a>>;

/// The way to another node's front door, implemented by the node's cluster transport: hands
/// a frame ([`encode_call`]) to `node`, whose [`Users::serve_peer`] answers it, and returns the
/// answer's frame, within `timeout`.
pub trait PeerLink: Send + Sync + fmt::Debug {
    /// Sends `frame` to `node` and waits for the answer.
    fn call<'a>(&'a self, node: &'a str, frame: Vec<u8>, timeout: Duration) -> LinkFuture<'a>;
}

/// Counters of the front door, exported as metrics by the node.
#[derive(Debug, Default)]
pub struct FrontMetrics {
    /// Requests this node sent to their user's owner (each once, however many attempts).
    pub forwarded: AtomicU64,
    /// Requests this node served for peers.
    pub served_for_peers: AtomicU64,
    /// Attempts at an owner that failed (unreachable, no answer) and were retried or refused.
    pub forward_failures: AtomicU64,
    /// Frames from peers that did not decode (answered with an error, never a panic).
    pub bad_frames: AtomicU64,
    /// Requests from peers whose caller the credential did not prove (answered 403).
    pub refused_callers: AtomicU64,
}

/// The front door of one node's user actors.
pub struct Users {
    directory: Arc<Directory>,
    link: Option<Arc<dyn PeerLink>>,
    handoff_wait: Duration,
    /// How peers' callers are checked; until set, peers' requests are refused.
    caller_check: OnceLock<Arc<dyn CallerCheck>>,
    /// Counters.
    pub metrics: FrontMetrics,
    /// The deliberately broken build's stale answers ([`FAULT_ENV`]); `None` otherwise.
    stale_reads: Option<fault::StaleReads>,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Users")
            .field("link", &self.link)
            .field("handoff_wait", &self.handoff_wait)
            .finish_non_exhaustive()
    }
}

impl Users {
    /// The front door over `directory`; `link` reaches the other nodes (none on a single
    /// node); a call for a moving shard waits up to `handoff_wait`.
    pub fn new(
        directory: Arc<Directory>,
        link: Option<Arc<dyn PeerLink>>,
        handoff_wait: Duration,
    ) -> Self {
        Users {
            directory,
            link,
            handoff_wait,
            caller_check: OnceLock::new(),
            metrics: FrontMetrics::default(),
            stale_reads: fault::StaleReads::from_env(),
        }
    }

    /// Checks the caller of every request from a peer with `check` (once; a second is
    /// ignored). Until then, requests from peers are refused.
    pub fn check_peer_callers(&self, check: Arc<dyn CallerCheck>) {
        if self.caller_check.set(check).is_err() {
            tracing::warn!("a second caller check was given to the front door; ignored");
        }
    }

    /// The node's directory of user actors.
    pub fn directory(&self) -> &Arc<Directory> {
        &self.directory
    }

    /// Asks `request` of `user` as `reader`, with its typed reply.
    pub async fn ask<R: Ask>(
        &self,
        reader: &Reader,
        user: &UserKey,
        request: R,
    ) -> Result<R::Reply> {
        let reply = self.call(reader, user, request.into()).await?;
        typed::<R>(reply)
    }

    /// Asks `request` of `user` as `reader`, proved by the client's `credential` should the
    /// request travel to another node, with its typed reply.
    pub async fn ask_as<R: Ask>(
        &self,
        reader: &Reader,
        credential: Option<&Credential>,
        user: &UserKey,
        request: R,
    ) -> Result<R::Reply> {
        let reply = self
            .call_as(reader, credential, user, request.into())
            .await?;
        typed::<R>(reply)
    }

    /// Asks `request` of `user` as `reader`: served here when this node holds the user's
    /// shard, else by its owner (which refuses it: no credential travels with it).
    pub async fn call(
        &self,
        reader: &Reader,
        user: &UserKey,
        request: UserRequest,
    ) -> Result<UserReply> {
        self.call_as(reader, None, user, request).await
    }

    /// Asks `request` of `user` as `reader`: served here when this node holds the user's
    /// shard, else by its owner, to which `credential` travels with the reader.
    pub async fn call_as(
        &self,
        reader: &Reader,
        credential: Option<&Credential>,
        user: &UserKey,
        request: UserRequest,
    ) -> Result<UserReply> {
        let services = self.directory.services();
        let (Some(ownership), Some(link)) = (&services.ownership, &self.link) else {
            return self.directory.serve(reader, user, request).await;
        };
        let shard = user.shard(services.settings.shards);
        let deadline = Instant::now() + self.handoff_wait;
        let mut frame = None;
        let mut counted = false;
        loop {
            if ownership.lease(shard).is_ok() {
                // Served here, whatever the outcome: a write fenced because this node lost
                // the shard meanwhile answers `NotOwner`, and the client retries it with the
                // same request id (it may have been stalled past any wait).
                let Some(stale) = &self.stale_reads else {
                    return self.directory.serve(reader, user, request).await;
                };
                let reply = self.directory.serve(reader, user, request.clone()).await;
                stale.remember(user, &request, &reply);
                return reply;
            } else if let Some(reply) = self
                .stale_reads
                .as_ref()
                .and_then(|stale| stale.recall(user, &request))
            {
                return Ok(reply);
            } else if let Some(owner) = ownership.owner(shard).filter(|o| o != ownership.node()) {
                let frame =
                    frame.get_or_insert_with(|| encode_call(reader, credential, user, &request));
                // An owner that does not answer within the wait (partitioned, or its session
                // broke without TCP noticing) costs the caller at most the wait.
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(MIN_ATTEMPT);
                match link.call(&owner, frame.clone(), left).await {
                    Ok(answer) => {
                        if !counted {
                            counted = true;
                            self.metrics.forwarded.fetch_add(1, Ordering::Relaxed);
                        }
                        match decode_reply(&answer) {
                            // The owner lost the shard meanwhile: look again.
                            Ok(Err(Fault::NotOwner(_))) => {}
                            Ok(reply) => return reply.map_err(Error::from),
                            Err(err) => {
                                return Err(Error::Unavailable(format!(
                                    "node {owner} answered with a frame this node cannot \
                                     read: {err}"
                                )));
                            }
                        }
                    }
                    Err(err) => {
                        self.metrics
                            .forward_failures
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(shard, owner = %owner, error = %err, "forward failed");
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::NotOwner(format!(
                    "shard {shard} has no reachable owner yet (it is moving); retry with the \
                     same request id"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Answers a frame from a peer: served here if this node holds the user's shard, else
    /// [`Fault::NotOwner`] (a forwarded request is never forwarded again), once the
    /// [`CallerCheck`] found the frame's credential to prove its reader ([`Fault::Forbidden`]
    /// otherwise, and when no check was given). A frame that does not decode is answered
    /// with an error and counted, never a panic.
    pub async fn serve_peer(&self, frame: &[u8]) -> Vec<u8> {
        let answer = match decode_call(frame) {
            Ok(call) => self.serve_checked(call).await,
            Err(err) => {
                self.metrics.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %err, "malformed frame from a peer dropped");
                Err(Fault::BadFrame(err.to_string()))
            }
        };
        encode_reply(&answer)
    }

    async fn serve_checked(&self, call: PeerCall) -> std::result::Result<UserReply, Fault> {
        let checked = match self.caller_check.get() {
            Some(check) => check.check(&call.reader, call.credential.as_ref()).await,
            None => Err("this node checks no forwarded callers".to_owned()),
        };
        if let Err(why) = checked {
            self.metrics.refused_callers.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(reason = %why, "refused a peer's request: its caller is not proved");
            return Err(Fault::Forbidden(format!(
                "the owner did not accept the forwarded caller: {why}"
            )));
        }
        self.metrics
            .served_for_peers
            .fetch_add(1, Ordering::Relaxed);
        self.directory
            .serve(&call.reader, &call.user, call.request)
            .await
            .map_err(Fault::from)
    }
}

//! The front door's frames between nodes: a call (reader, user, request) and its answer (a
//! reply or a [`Fault`]), each one format byte then postcard ([`engram_storage::codec`]).
//! A frame of an unknown format or a malformed body decodes to an error, never a panic; a
//! new layout gets a new format byte and a decoder beside the old one.

use engram_storage::codec::{decode, encode};
use serde::{Deserialize, Serialize};

use super::{Credential, Reader, UserReply, UserRequest};
use crate::error::Error;
use crate::placement::UserKey;

/// An error as it travels back from the owner: the outcome the caller must see (its status
/// and code), without the owner's internals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Fault {
    /// [`Error::InvalidInput`].
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// [`Error::NotFound`].
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// [`Error::Forbidden`].
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// [`Error::ApprovalRequired`].
    #[error("approval required after {reads} reads")]
    ApprovalRequired {
        /// Reads counted.
        reads: u32,
    },
    /// [`Error::TooLarge`], or the owner's storage refused a value or write as too large.
    #[error("too large: {0}")]
    TooLarge(String),
    /// [`Error::Overloaded`].
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// [`Error::NotOwner`]: the receiver does not hold the shard (any more).
    #[error("not the owner: {0}")]
    NotOwner(String),
    /// [`Error::Unavailable`], or the owner's storage was busy.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The receiver could not read the call's frame.
    #[error("bad frame: {0}")]
    BadFrame(String),
    /// The owner failed (it logged why).
    #[error("internal error on the owner")]
    Internal,
}

impl From<Error> for Fault {
    fn from(err: Error) -> Self {
        match err {
            Error::InvalidInput { field, reason } => Fault::InvalidInput { field, reason },
            Error::NotFound { what } => Fault::NotFound { what },
            Error::Forbidden(reason) => Fault::Forbidden(reason),
            Error::ApprovalRequired { reads } => Fault::ApprovalRequired { reads },
            Error::TooLarge(what) => Fault::TooLarge(what),
            Error::Overloaded(why) => Fault::Overloaded(why),
            Error::NotOwner(why) => Fault::NotOwner(why),
            Error::Unavailable(why) => Fault::Unavailable(why),
            Error::Storage(storage) => storage_fault(&storage),
            Error::Internal(why) => {
                tracing::error!(error = %why, "request from a peer failed");
                Fault::Internal
            }
        }
    }
}

fn storage_fault(err: &engram_storage::Error) -> Fault {
    use engram_storage::Outcome;
    match err.outcome() {
        Outcome::TooLarge => Fault::TooLarge(err.to_string()),
        Outcome::Busy => {
            Fault::Unavailable("storage is busy; retry with the same request id".into())
        }
        Outcome::KeyService => {
            tracing::warn!(error = %err, "key service failed");
            Fault::Unavailable("the key service is unavailable; retry".into())
        }
        Outcome::Full => {
            tracing::warn!(error = %err, "the store's disk is full");
            Fault::Unavailable("the store's disk is full; retry with the same request id".into())
        }
        Outcome::Io => {
            tracing::warn!(error = %err, "the store's disk failed");
            Fault::Unavailable(
                "the store's disk failed to write; retry with the same request id".into(),
            )
        }
        Outcome::Internal => {
            tracing::error!(error = %err, "request from a peer failed in storage");
            Fault::Internal
        }
    }
}

impl From<Fault> for Error {
    fn from(fault: Fault) -> Self {
        match fault {
            Fault::InvalidInput { field, reason } => Error::InvalidInput { field, reason },
            Fault::NotFound { what } => Error::NotFound { what },
            Fault::Forbidden(reason) => Error::Forbidden(reason),
            Fault::ApprovalRequired { reads } => Error::ApprovalRequired { reads },
            Fault::TooLarge(what) => Error::TooLarge(what),
            Fault::Overloaded(why) => Error::Overloaded(why),
            Fault::NotOwner(why) => Error::NotOwner(why),
            Fault::Unavailable(why) => Error::Unavailable(why),
            Fault::BadFrame(why) => Error::Internal(format!("the owner could not read: {why}")),
            Fault::Internal => Error::Internal("the owner failed; it logged why".into()),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Call {
    reader: Reader,
    tenant: String,
    user: String,
    request: UserRequest,
    credential: Option<Credential>,
}

/// A call as the owner reads it: who says they ask, what proves it, whom and what they ask.
#[derive(Debug)]
pub struct PeerCall {
    /// The caller as the forwarding node authenticated it.
    pub reader: Reader,
    /// The client's own credential, for the owner to check the reader against.
    pub credential: Option<Credential>,
    /// The user asked about.
    pub user: UserKey,
    /// The request.
    pub request: UserRequest,
}

/// The frame of a call: the reader, the client's credential (so that the owner can check
/// the reader itself), the user and the request.
pub fn encode_call(
    reader: &Reader,
    credential: Option<&Credential>,
    user: &UserKey,
    request: &UserRequest,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct CallRef<'a> {
        reader: &'a Reader,
        tenant: &'a str,
        user: &'a str,
        request: &'a UserRequest,
        credential: Option<&'a Credential>,
    }
    let call = CallRef {
        reader,
        tenant: &user.tenant,
        user: &user.user,
        request,
        credential,
    };
    // Postcard cannot fail on these types (no maps of unknown length, no non-string keys).
    encode("front-door call", &call).unwrap_or_default()
}

/// Reads a call's frame.
pub fn decode_call(frame: &[u8]) -> engram_storage::Result<PeerCall> {
    let call: Call = decode("front-door call", frame)?;
    Ok(PeerCall {
        reader: call.reader,
        credential: call.credential,
        user: UserKey::new(call.tenant, call.user),
        request: call.request,
    })
}

/// The frame of an answer.
pub fn encode_reply(answer: &Result<UserReply, Fault>) -> Vec<u8> {
    encode("front-door reply", answer).unwrap_or_else(|err| {
        tracing::error!(error = %err, "cannot encode a reply");
        encode::<Result<UserReply, Fault>>("front-door reply", &Err(Fault::Internal))
            .unwrap_or_default()
    })
}

/// Reads an answer's frame.
pub fn decode_reply(frame: &[u8]) -> engram_storage::Result<Result<UserReply, Fault>> {
    decode("front-door reply", frame)
}

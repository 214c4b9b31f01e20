//! What a user's memory can be asked: the typed requests ([`UserRequest`], each payload with
//! its reply type through [`Ask`]), their answers ([`UserReply`]) and who asks ([`Reader`],
//! with the client's [`Credential`] when a request travels to another node).
//!
//! A leaf of the crate: the router ([`crate::front`]), the directory and the actors that serve
//! these requests all import it, and it imports none of them. The payloads of a user's actor
//! are in [`user`], those of a tenant's actor of shared sets in [`tenant`].

use std::fmt;

use engram_storage::access::Scope;
use engram_storage::schema::SchemaEntry;
use engram_storage::shared::{Example, SharedSettings};
use engram_storage::types::{Intent, MemoryRecord, ReviewFlag, TurnDigest};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::context::MemoryContext;
#[cfg(doc)]
use crate::placement::UserKey;

pub mod tenant;
pub mod user;

use self::tenant::{
    ExampleAck, ExampleExport, ExampleFailure, ExampleImport, ExampleList, ExampleRecord,
    ExampleReview, ExampleSearch, ExampleSearchReply, ImportAck, InvalidateAck, MetadataList,
    MetadataPut, MetadataRemove, PortableExample, ReadSettings, SettingsAck, SqlInvalidate,
    SqlLookup, SqlLookupReply, SqlPut, SqlPutAck, WriteSettings,
};
use self::user::{
    AnchorMatch, AnchorQuery, ApprovalAck, ApproveReads, ArchiveMatch, ArchivePage, ArchiveQuery,
    ClearAck, ClearSession, ContextQuery, DistilAck, FeedbackAck, FeedbackRequest, Forget,
    ForgetAck, IntentAck, IntentQuery, IntentWrite, KeyIntents, ListFlags, ListMemories,
    ListSessions, MemoryAck, MemoryWrite, MessageWrite, ResolveAck, ResolveConflict, SearchQuery,
    SearchResult, SessionListing, SessionMemory, SessionQuery, StatusChange, TurnAck, TurnRequest,
};

/// Who asks: the API key (or the root key) behind a request, its scope and the tenant it
/// acts for. Travels with every request, to the owner's actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reader {
    /// Key id (`root` for the configured admin key).
    pub principal: String,
    /// What the key may do.
    pub scope: Scope,
    /// The tenant the request acts for.
    pub tenant: String,
}

impl Reader {
    /// Whether the reader sees personal data in full and may ask admin-only requests.
    pub fn is_admin(&self) -> bool {
        self.scope == Scope::Admin
    }

    /// Whether this reader may ask `request` of an actor of `tenant` (`whose` names that
    /// actor's data in the refusal): the key must act for that tenant; admin keys ask
    /// anything, gateway keys anything but `admin_only` requests, operator keys nothing.
    pub fn admit(
        &self,
        tenant: &str,
        whose: &str,
        request: &UserRequest,
        admin_only: bool,
    ) -> Result<()> {
        if self.tenant != tenant {
            return Err(Error::Forbidden(format!(
                "the key acts for another tenant than {whose}"
            )));
        }
        match self.scope {
            Scope::Admin => Ok(()),
            Scope::Gateway if !admin_only => Ok(()),
            Scope::Gateway => Err(Error::Forbidden(format!(
                "{} needs an admin key",
                request.name()
            ))),
            Scope::Operator => Err(Error::Forbidden(
                "operator keys serve cluster operations only".into(),
            )),
        }
    }
}

/// What the client presented to the node that took its request (its bearer token), carried
/// to the owner of the user so that the owner authenticates the caller itself. Never shown in
/// logs or debug output.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential(String);

impl Credential {
    /// The credential `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Credential(token.into())
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(..)")
    }
}

/// A request with its reply type: what the front door's `ask` takes.
pub trait Ask: Into<UserRequest> {
    /// What the user's actor answers.
    type Reply;

    /// The typed reply out of a [`UserReply`]; `None` when the reply is of another request.
    fn reply(reply: UserReply) -> Option<Self::Reply>;
}

macro_rules! front_door {
    ($($(#[$doc:meta])* $name:ident($request:ty) -> $reply:ty;)*) => {
        /// Everything a user's memory can be asked. Serialisable: requests for users another
        /// node owns travel to it in this form.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum UserRequest {
            $($(#[$doc])* $name($request),)*
        }

        /// The answers, one variant per request.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum UserReply {
            $($(#[$doc])* $name($reply),)*
        }

        impl UserRequest {
            /// The request's name, for logs and metrics.
            pub fn name(&self) -> &'static str {
                match self {
                    $(UserRequest::$name(_) => stringify!($name),)*
                }
            }
        }

        $(
            impl From<$request> for UserRequest {
                fn from(request: $request) -> Self {
                    UserRequest::$name(request)
                }
            }

            impl Ask for $request {
                type Reply = $reply;

                fn reply(reply: UserReply) -> Option<$reply> {
                    if let UserReply::$name(reply) = reply { Some(reply) } else { None }
                }
            }
        )*
    };
}

front_door! {
    /// Append a conversation turn.
    Turn(TurnRequest) -> TurnAck;
    /// Record feedback on a turn.
    Feedback(FeedbackRequest) -> FeedbackAck;
    /// Assemble a memory context.
    Context(ContextQuery) -> MemoryContext;
    /// Search the user's memories.
    Search(SearchQuery) -> SearchResult;
    /// Write or upsert a memory record.
    WriteMemory(MemoryWrite) -> MemoryAck;
    /// Activate, suppress or delete a memory.
    SetStatus(StatusChange) -> MemoryAck;
    /// List memory records.
    ListMemories(ListMemories) -> Vec<MemoryRecord>;
    /// List sessions.
    ListSessions(ListSessions) -> Vec<SessionListing>;
    /// A session's newest turns.
    SessionMemory(SessionQuery) -> SessionMemory;
    /// Delete a session's memory.
    ClearSession(ClearSession) -> ClearAck;
    /// Forget the user entirely (admin).
    Forget(Forget) -> ForgetAck;
    /// Record a new version of a distilled intent.
    WriteIntent(IntentWrite) -> IntentAck;
    /// The versions of an intent type, newest first.
    Intents(IntentQuery) -> Vec<Intent>;
    /// Distil a message: rules at once, the model in the background.
    Distil(MessageWrite) -> DistilAck;
    /// The current versions of the key intent types (pre-warm at login).
    KeyIntents(KeyIntents) -> Vec<Intent>;
    /// Contradictions flagged for review.
    Flags(ListFlags) -> Vec<ReviewFlag>;
    /// Settle a flagged contradiction.
    ResolveConflict(ResolveConflict) -> ResolveAck;
    /// Whether the user gave an identifier (counted by the sensitive-read breaker).
    MatchAnchor(AnchorQuery) -> AnchorMatch;
    /// A page of the user's archive (admin).
    ReadArchive(ArchiveQuery) -> ArchivePage;
    /// The archived digests of a text (admin).
    MatchArchive(ArchiveMatch) -> Vec<TurnDigest>;
    /// Approve further sensitive reads of the user (admin).
    ApproveReads(ApproveReads) -> ApprovalAck;
    /// Look a question up in the tenant's SQL cache (the tenant's actor).
    SqlLookup(SqlLookup) -> SqlLookupReply;
    /// Store the SQL of a question in the tenant's SQL cache.
    SqlPut(SqlPut) -> SqlPutAck;
    /// Drop the tenant's cached SQL that mentions a table.
    SqlInvalidate(SqlInvalidate) -> InvalidateAck;
    /// Record a successful question and SQL in the tenant's few-shot library.
    RecordExample(ExampleRecord) -> ExampleAck;
    /// The approved examples closest to a question.
    SearchExamples(ExampleSearch) -> ExampleSearchReply;
    /// List the tenant's examples (admin).
    ListExamples(ExampleList) -> Vec<Example>;
    /// Approve, reject or edit an example (admin).
    ReviewExample(ExampleReview) -> ExampleAck;
    /// Report an example that led to a failure.
    ExampleFailed(ExampleFailure) -> ExampleAck;
    /// Export the tenant's examples (admin).
    ExportExamples(ExampleExport) -> Vec<PortableExample>;
    /// Import examples (admin).
    ImportExamples(ExampleImport) -> ImportAck;
    /// The tenant's settings of its shared sets.
    ReadSettings(ReadSettings) -> SharedSettings;
    /// Replace the tenant's settings of its shared sets (admin).
    WriteSettings(WriteSettings) -> SettingsAck;
    /// Cache a table's metadata for the tenant (the entry as stored; `None`: the tenant
    /// caches as many entries as it may).
    MetadataPut(MetadataPut) -> Option<SchemaEntry>;
    /// The tenant's cached metadata still live, by name.
    MetadataList(MetadataList) -> Vec<SchemaEntry>;
    /// Remove a cached metadata entry (whether there was one).
    MetadataRemove(MetadataRemove) -> bool;
}

impl UserRequest {
    /// Whether the request writes the user's data (a user with no data gets data only by
    /// these).
    pub fn writes(&self) -> bool {
        match self {
            UserRequest::Turn(_)
            | UserRequest::Feedback(_)
            | UserRequest::WriteMemory(_)
            | UserRequest::SetStatus(_)
            | UserRequest::ClearSession(_)
            | UserRequest::Forget(_)
            | UserRequest::WriteIntent(_)
            | UserRequest::ResolveConflict(_)
            | UserRequest::Distil(_)
            | UserRequest::SqlPut(_)
            | UserRequest::SqlInvalidate(_)
            | UserRequest::RecordExample(_)
            | UserRequest::ReviewExample(_)
            | UserRequest::ExampleFailed(_)
            | UserRequest::ImportExamples(_)
            | UserRequest::WriteSettings(_)
            | UserRequest::MetadataPut(_)
            | UserRequest::MetadataRemove(_) => true,
            UserRequest::Context(_)
            | UserRequest::Search(_)
            | UserRequest::ListMemories(_)
            | UserRequest::ListSessions(_)
            | UserRequest::SessionMemory(_)
            | UserRequest::Intents(_)
            | UserRequest::KeyIntents(_)
            | UserRequest::Flags(_)
            | UserRequest::MatchAnchor(_)
            | UserRequest::ReadArchive(_)
            | UserRequest::MatchArchive(_)
            | UserRequest::ApproveReads(_)
            | UserRequest::SqlLookup(_)
            | UserRequest::SearchExamples(_)
            | UserRequest::ListExamples(_)
            | UserRequest::ExportExamples(_)
            | UserRequest::ReadSettings(_)
            | UserRequest::MetadataList(_) => false,
        }
    }

    /// Whether the request is for the tenant's shared sets or its schema metadata (served by
    /// the tenant's actor, under the key [`UserKey::shared`]).
    pub fn is_shared(&self) -> bool {
        matches!(
            self,
            UserRequest::SqlLookup(_)
                | UserRequest::SqlPut(_)
                | UserRequest::SqlInvalidate(_)
                | UserRequest::RecordExample(_)
                | UserRequest::SearchExamples(_)
                | UserRequest::ListExamples(_)
                | UserRequest::ReviewExample(_)
                | UserRequest::ExampleFailed(_)
                | UserRequest::ExportExamples(_)
                | UserRequest::ImportExamples(_)
                | UserRequest::ReadSettings(_)
                | UserRequest::WriteSettings(_)
                | UserRequest::MetadataPut(_)
                | UserRequest::MetadataList(_)
                | UserRequest::MetadataRemove(_)
        )
    }
}

/// The typed reply of `R` out of `reply`.
pub(crate) fn typed<R: Ask>(reply: UserReply) -> Result<R::Reply> {
    R::reply(reply).ok_or_else(|| Error::Internal("a reply of another request".into()))
}

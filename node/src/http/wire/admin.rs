//! Wire types of the security endpoints: API keys, the audit trail, approvals of sensitive
//! reads, the archive, identity anchors.

use engram_storage::access::{ApiKey, AuditEntry};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `POST /v1/admin/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    /// `gateway`, `operator` or `admin`.
    pub scope: String,
    /// A label for people.
    pub name: Option<String>,
    /// The tenant (must be the one the key acts for; the root key names it with
    /// `x-engram-tenant`).
    pub tenant: Option<String>,
}

/// `POST /v1/admin/keys/{key_id}/rotate`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// How long the old key keeps working, in seconds (default 0: it stops at once).
    pub grace_seconds: Option<u64>,
}

/// A key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    /// Key id.
    pub key_id: String,
    /// Tenant.
    pub tenant: String,
    /// Scope.
    pub scope: String,
    /// Label.
    pub name: String,
    /// Made at (Unix ms).
    pub created_at: i64,
    /// Made by (a key id).
    pub created_by: String,
    /// Stops (or stopped) working at (Unix ms).
    pub expires_at: Option<i64>,
    /// The key that replaced it.
    pub replaced_by: Option<String>,
}

impl From<ApiKey> for KeyView {
    fn from(k: ApiKey) -> Self {
        KeyView {
            key_id: k.id,
            tenant: k.tenant,
            scope: k.scope.as_str().to_owned(),
            name: k.name,
            created_at: k.created_at.0,
            created_by: k.created_by,
            expires_at: k.expires_at.map(|t| t.0),
            replaced_by: k.replaced_by,
        }
    }
}

/// A key just made, with its token: shown this once, never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKeyResponse {
    /// The key.
    #[serde(flatten)]
    pub key: KeyView,
    /// The bearer token (`egk_<id>_<secret>`).
    pub token: String,
}

/// `GET /v1/admin/keys`.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeysResponse {
    /// The tenant's keys.
    pub keys: Vec<KeyView>,
}

/// Query of the audit trail.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only entries about this user id.
    pub user: Option<String>,
    /// Only entries of this key id.
    pub principal: Option<String>,
    /// Only entries of this action (e.g. `memory.status`, `conflict.resolve`).
    pub action: Option<String>,
    /// From (Unix ms, inclusive; default 0).
    pub from: Option<i64>,
    /// To (Unix ms, exclusive; default now + 1).
    pub to: Option<i64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// Query of the tenant's users.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UsersQuery {
    /// Only users after this id (the previous page's `next_after`).
    pub after: Option<String>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// A user of the tenant.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    /// User id.
    pub user_id: String,
}

/// `GET /v1/admin/users`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsersResponse {
    /// The tenant's users holding any data, in key order (the byte order of their ids).
    pub users: Vec<UserView>,
    /// When more users follow: the `after` of the next page.
    pub next_after: Option<String>,
}

/// `?after=&limit=` of `GET /v1/admin/notices`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct NoticesQuery {
    /// Only notices after this one (the previous page's `next_after`).
    pub after: Option<String>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// A compliance notice: what the memory model protected and why, naming no condition and no
/// text.
#[derive(Debug, Serialize, ToSchema)]
pub struct NoticeView {
    /// Notice id.
    pub notice_id: String,
    /// When (Unix ms).
    pub at: i64,
    /// The user it concerns.
    pub user_id: String,
    /// Why: `health_condition` (a distilled intent's identity anchor holds one).
    pub reason: String,
    /// The protected version's intent type.
    pub intent_type: String,
    /// Its version (Unix ms).
    pub version: i64,
    /// Whether it is sealed at rest (false on a node without a key service).
    pub sealed: bool,
}

/// `GET /v1/admin/notices`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NoticesResponse {
    /// The tenant's notices, oldest first.
    pub notices: Vec<NoticeView>,
    /// When more follow: the `after` of the next page.
    pub next_after: Option<String>,
}

impl From<engram_actors::admin::Notice> for NoticeView {
    fn from(n: engram_actors::admin::Notice) -> Self {
        NoticeView {
            notice_id: n.notice_id,
            at: n.at.0,
            user_id: n.user_id,
            reason: n.reason,
            intent_type: n.intent_type,
            version: n.version.0,
            sealed: n.sealed,
        }
    }
}

/// An audit entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    /// Entry id.
    pub id: String,
    /// When (Unix ms).
    pub at: i64,
    /// Key id that acted.
    pub principal: String,
    /// Tenant.
    pub tenant: String,
    /// The user's pseudonym (a keyed hash of the id; query by `user` to match it).
    pub user: Option<String>,
    /// What was done.
    pub action: String,
    /// Ids named.
    pub ids: Vec<String>,
    /// Client address.
    pub client: Option<String>,
    /// HTTP status of the answer.
    pub outcome: u16,
}

impl From<AuditEntry> for AuditView {
    fn from(e: AuditEntry) -> Self {
        AuditView {
            id: e.id,
            at: e.at.0,
            principal: e.principal,
            tenant: e.tenant,
            user: e.user,
            action: e.action,
            ids: e.ids,
            client: e.client,
            outcome: e.outcome,
        }
    }
}

/// `GET /v1/admin/audit`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditResponse {
    /// Entries, oldest first.
    pub entries: Vec<AuditView>,
    /// When the page is full: the `from` of the next page (entries of that millisecond may
    /// repeat).
    pub next_from: Option<i64>,
}

/// `POST /v1/admin/users/{user}/approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalResponse {
    /// Counted events cleared, for every key: sensitive reads and anchor matches.
    pub cleared: u32,
}

/// `POST /v1/users/{user}/anchors/match`: an identifier to check.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnchorBody {
    /// A resident ID or passport number (never stored, never logged).
    pub value: String,
}

/// Whether the user gave the identifier.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnchorResponse {
    /// The user gave it.
    pub matched: bool,
    /// What it is, when matched (`resident-id`, `passport`).
    pub kind: Option<String>,
    /// When the user first gave it (Unix ms), when matched.
    pub first_seen: Option<i64>,
    /// False when the node keeps no anchors (no master keys): `matched` is then false
    /// whatever the user gave.
    pub keyed: bool,
}

/// Query of a user's archive.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ArchiveParams {
    /// One session only.
    pub session: Option<String>,
    /// Continue after this session's turn (the `next` of the previous page).
    pub after_session: Option<String>,
    /// Continue after this turn.
    pub after_seq: Option<u64>,
    /// At most this many entries (default 100, at most 500).
    pub limit: Option<usize>,
    /// `turns` (whole turns) or `digests`; default: what the tenant's `memory.archive` mode
    /// keeps (digests in `digests` mode, else turns).
    pub kind: Option<ArchiveKindParam>,
}

/// What an archive read returns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ArchiveKindParam {
    /// Whole turns (archived in `full-text` mode).
    Turns,
    /// Digests (archived in `digests` mode).
    Digests,
}

/// An archived turn's digest: when and where it was said, and keyed hashes of its texts
/// (hex), never the texts.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchivedDigestView {
    /// Session.
    pub session_id: String,
    /// Sequence number in the session.
    pub seq: u64,
    /// Route.
    pub route: Option<String>,
    /// Written at (Unix ms).
    pub created_at: i64,
    /// Archived at (Unix ms).
    pub archived_at: i64,
    /// HMAC-SHA256 of the user's text under the tenant's key (SHA-256 when `keyed` is false).
    pub user_hash: String,
    /// Likewise of the assistant's text.
    pub assistant_hash: String,
    /// Whether the hashes are keyed (the node has master keys).
    pub keyed: bool,
    /// Characters of the user's text.
    pub user_chars: u32,
    /// Characters of the assistant's text.
    pub assistant_chars: u32,
    /// The highest level of personal data the turn held (`none`, `low`, `medium`, `high`).
    pub pii_level: String,
}

/// `POST /v1/admin/users/{user}/archive/match`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveMatchBody {
    /// The text to look for (compared after trimming and collapsing whitespace; at most
    /// 16 KiB).
    pub text: String,
    /// Whose text it is: `user` (default) or `assistant`.
    #[serde(default)]
    pub role: Option<MatchRole>,
}

/// Whose text an archive match looks for.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MatchRole {
    /// The user's.
    User,
    /// The assistant's.
    Assistant,
}

/// The archived digests whose text matched.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchiveMatchResponse {
    /// By session then sequence number.
    pub matches: Vec<ArchivedDigestView>,
}

/// An archived raw turn, in full (only admins read the archive).
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchivedTurnView {
    /// Session.
    pub session_id: String,
    /// Sequence number in the session.
    pub seq: u64,
    /// The user's text.
    pub user_text: String,
    /// The assistant's text.
    pub assistant_text: String,
    /// Route.
    pub route: Option<String>,
    /// Written at (Unix ms).
    pub created_at: i64,
    /// Archived at (Unix ms).
    pub archived_at: i64,
}

/// Where the next page of an archive starts.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchiveNext {
    /// `after_session` of the next read.
    pub after_session: String,
    /// `after_seq` of the next read.
    pub after_seq: u64,
}

/// `GET /v1/admin/users/{user}/archive`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchiveResponse {
    /// What the page holds: `turns` or `digests`.
    pub kind: ArchiveKindParam,
    /// Whole turns, by session then sequence number (`kind` turns).
    pub turns: Vec<ArchivedTurnView>,
    /// Digests, by session then sequence number (`kind` digests).
    pub digests: Vec<ArchivedDigestView>,
    /// The next page, if any.
    pub next: Option<ArchiveNext>,
}

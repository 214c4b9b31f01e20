//! Distilled intents in storage: versions, and the validation gate every distilled result
//! passes before it is written (seed design 004; docs/architecture.md, "Memory model").
//!
//! Versions are keyed by (type, version time) and never overwritten; the newest is the
//! active one. [`write_version`] is the one place a version is written: by the gateway
//! (`/v1/.../intents`, the seed's `/write` with fields) and by the gate.
//!
//! The gate ([`gate`]), for what the rules or the model found in a message:
//! - no intent, or a type the tenant does not use: nothing is written;
//! - required fields: a renewal, a cancellation or an appointment needs a target; without
//!   one the message is distilled once more ([`Verdict::Retry`]), then dropped and counted;
//! - personal data in the message or the fields: the version is marked `protection: high`
//!   and `compliance_review: true` (and masked on every gateway read, as all intents are);
//! - identity facts: the message's identity anchor (`{user_id, anchor, age,
//!   health_condition}`) is kept in the version; a health condition is high-level personal
//!   data (so `protection: high`, and every read of the version is a sensitive read the
//!   breaker counts), the version says whether it is `sealed` at rest, and the tenant gets a
//!   notice and an audit entry naming neither the condition nor any text;
//! - the same type again within the replace window (10 minutes by default): the newer
//!   result replaces the earlier version, so a rule's result and the model's of the same
//!   message leave one version;
//! - a cancellation deactivates the active renewal it matches (same target, or any when the
//!   cancellation names none);
//! - every version carries `expires_at` (the TTL, 30 days by default): an expired version is
//!   no longer served, and the sweep removes it.

use engram_inference::distil::{Distilled, needs_target};
use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::data::notice::Notice;
use engram_storage::types::{Intent, PiiLevel, Timestamp};
use serde_json::{Value, json};

use crate::distillation::GateRules;
use crate::model::intent::target::{product, structured};
pub use crate::model::intent::{
    KEY_INTENT_TYPES, is_current, target_matches, target_of, target_value_of,
};
use crate::model::pii;
use crate::model::pii::health;
use crate::request::user::IntentAck;

/// Where a distilled result comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The rules, at write time.
    Rule,
    /// The generative model, in the background.
    Model,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Rule => "rule",
            Source::Model => "model",
        }
    }
}

/// What the gate did with a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Written as a new version (or replacing one within the window).
    Written(IntentAck),
    /// Missing a required field: distil once more.
    Retry,
    /// Not written, and why (a counted reason, no personal data).
    Dropped(&'static str),
}

/// The identity facts a message gives of its user, as the seed's identity anchor holds them:
/// `{user_id, anchor, age, health_condition}`, `anchor` the kind of identifier given (its
/// value is never stored here), `age` when the user gave theirs, `health_condition` the
/// conditions named ([`health::conditions_in`]).
pub fn identity_anchor(user_id: &str, message: &str) -> Value {
    json!({
        "user_id": user_id,
        "anchor": pii::anchors_in(message).first().map(|(kind, _)| kind.as_str()),
        "age": health::age_in(message),
        "health_condition": health::conditions_in(message),
    })
}

/// The stored fields of a distilled result: the seed's shape, plus where it came from, when
/// it expires and its protection. `target_value` is the structured target of the type
/// ([`structured`]), or the short target as a string for a type without one.
pub fn seed_fields(
    d: &Distilled,
    structured_target: Option<Value>,
    source: Source,
    identity: Value,
    sensitive: bool,
    expires_at: Timestamp,
) -> Value {
    let mut fields = json!({
        "identity_anchor": null,
        "business_intent": {"intent_type": d.intent_type, "target": d.target.trim()},
        "decision_basis": {"key_reason": d.key_reason.trim(), "priority": d.priority.as_str()},
        "target_value": structured_target.unwrap_or_else(|| json!(d.target.trim())),
        "source": source.as_str(),
        "expires_at": expires_at.0,
    });
    fields["identity_anchor"] = identity;
    if sensitive {
        fields["protection"] = json!("high");
        fields["compliance_review"] = json!(true);
    }
    fields
}

/// Runs `d` (found in `message` of turn `turn`, written at `written`) through the gate and
/// writes it if it passes. `attempts` counts the model runs before this one; `types` are the
/// tenant's.
#[allow(clippy::too_many_arguments)]
pub fn gate(
    u: &mut UserData<'_>,
    now: Timestamp,
    written: Timestamp,
    d: &Distilled,
    source: Source,
    message: &str,
    turn: Option<u64>,
    types: &[String],
    attempts: u32,
    rules: &GateRules,
) -> StorageResult<Verdict> {
    if !d.is_intent() {
        return Ok(Verdict::Dropped("no intent"));
    }
    if !types.contains(&d.intent_type) {
        return Ok(Verdict::Dropped("unknown type"));
    }
    if needs_target(&d.intent_type) && d.target.trim().is_empty() {
        return Ok(if attempts == 0 && source == Source::Model {
            Verdict::Retry
        } else {
            Verdict::Dropped("missing target")
        });
    }
    let sensitive = pii::level_of([message]) >= PiiLevel::Medium
        || pii::level_of([d.target.as_str(), d.key_reason.as_str()]) >= PiiLevel::Medium;
    let identity = identity_anchor(u.user(), message);
    let health = identity["health_condition"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    let mut masked = d.clone();
    // Fields never hold an identifier in clear (the anchor names its kind only).
    masked.target = pii::mask(&d.target, PiiLevel::Medium);
    masked.key_reason = pii::mask(&d.key_reason, PiiLevel::Medium);
    let masked_message = pii::mask(message, PiiLevel::Medium);
    let target = structured(&d.intent_type, &masked_message, &masked.target, written);
    // A cancellation that names no subscription ("我不需要续订了"), in the message or the
    // short target, matches any renewal.
    let names_none = target
        .as_ref()
        .is_some_and(|t| t.get("product").is_some_and(Value::is_null))
        && product(&masked.target).is_none();
    let mut fields = seed_fields(
        &masked,
        target,
        source,
        identity,
        sensitive,
        Timestamp(now.0 + rules.ttl_ms),
    );
    let sealed = u.seals();
    if health {
        // The gate's health rule: protection high (a health condition is high-level
        // personal data), and whether the version is sealed at rest.
        fields["sealed"] = json!(sealed);
    }
    let mut ack = write_version(
        u,
        now,
        &d.intent_type,
        &fields,
        turn,
        rules.max_versions,
        Some(rules.replace_within_ms),
    )?;
    ack.flagged = sensitive;
    if health {
        protect_health(u, now, &d.intent_type, ack.version, sealed)?;
    }
    if d.intent_type == "subscription_cancel" {
        let target = if names_none { "" } else { d.target.trim() };
        ack.renewal_deactivated = deactivate_renewal(u, target)?;
    }
    Ok(Verdict::Written(ack))
}

/// The principal of what the memory model does on its own in the audit trail.
pub const MEMORY_MODEL: &str = "memory-model";

/// The gate's health rule, for a version of `intent_type` written at `version` whose
/// identity anchor holds a health condition: a notice the tenant's admins read
/// (`GET /v1/admin/notices`) and an entry in the audit trail (`intent.health_protected`),
/// neither naming the condition.
fn protect_health(
    u: &mut UserData<'_>,
    now: Timestamp,
    intent_type: &str,
    version: Timestamp,
    sealed: bool,
) -> StorageResult<()> {
    let notice_id = format!("{:032x}", rand::random::<u128>());
    u.put_notice(&Notice {
        notice_id: notice_id.clone(),
        at: now,
        user_id: u.user().to_owned(),
        reason: "health_condition".to_owned(),
        intent_type: intent_type.to_owned(),
        version,
        sealed,
    })?;
    u.audit(
        notice_id.clone(),
        now,
        MEMORY_MODEL,
        "intent.health_protected",
        vec![format!("{intent_type}:{}", version.0), notice_id],
    )
}

/// Writes a new version of `intent_type`; the active earlier versions become inactive
/// (nothing is overwritten: versions are keyed by time), except that the newest version is
/// removed instead when it is younger than `replace_within` (ms). At most `max_versions`
/// versions of a type are kept (at least 2): the oldest beyond that are removed, so a write
/// reads a bounded number of versions however many were ever written.
pub fn write_version(
    u: &mut UserData<'_>,
    now: Timestamp,
    intent_type: &str,
    fields: &Value,
    turn: Option<u64>,
    max_versions: usize,
    replace_within: Option<i64>,
) -> StorageResult<IntentAck> {
    let max_versions = max_versions.max(2);
    let mut newest = u.newest_intents(intent_type, None, max_versions)?;
    let version = newest
        .first()
        .map_or(now, |last| Timestamp(now.0.max(last.version.0 + 1)));
    let mut replaced = None;
    if let (Some(window), Some(last)) = (replace_within, newest.first())
        && now.0 - last.version.0 < window
    {
        u.delete_intent(intent_type, last.version)?;
        replaced = Some(last.version);
        newest.remove(0);
    }
    let mut deactivated = Vec::new();
    for old in newest.iter().filter(|v| v.active) {
        let mut old = old.clone();
        old.active = false;
        deactivated.push(old.version);
        u.put_intent(&old)?;
    }
    deactivated.reverse();
    // The new version and the newest `max_versions - 1` earlier ones stay.
    if let Some(oldest_kept) = newest.get(max_versions - 2)
        && newest.len() >= max_versions
    {
        u.prune_intents_before(intent_type, oldest_kept.version)?;
    }
    u.put_intent(&Intent {
        intent_type: intent_type.to_owned(),
        version,
        fields: fields.to_string(),
        active: true,
        source_turn: turn,
    })?;
    Ok(IntentAck {
        intent_type: intent_type.to_owned(),
        version,
        deactivated,
        replaced,
        flagged: false,
        renewal_deactivated: None,
        replayed: false,
    })
}

/// Deactivates the active renewal a cancellation of `target` matches; returns its version.
fn deactivate_renewal(u: &mut UserData<'_>, target: &str) -> StorageResult<Option<Timestamp>> {
    let Some(mut renewal) = u
        .newest_intents("subscription_renewal", None, 1)?
        .into_iter()
        .next()
        .filter(|r| r.active)
    else {
        return Ok(None);
    };
    if !target_matches(target, &target_of(&renewal)) {
        return Ok(None);
    }
    renewal.active = false;
    u.put_intent(&renewal)?;
    Ok(Some(renewal.version))
}

/// The current version of each key type, newest first.
pub fn key_intents(u: &mut UserData<'_>, now: Timestamp) -> StorageResult<Vec<Intent>> {
    let mut found = Vec::new();
    for t in KEY_INTENT_TYPES {
        if let Some(latest) = u.newest_intents(t, None, 1)?.into_iter().next()
            && is_current(&latest, now)
        {
            found.push(latest);
        }
    }
    found.sort_by_key(|i| std::cmp::Reverse(i.version));
    Ok(found)
}

#[cfg(test)]
mod tests;

/// What a write with a user message distils at once: the rules' result, and whether the
/// message is queued for the model.
#[derive(Debug, Clone)]
pub struct MessagePlan {
    /// What the rules found.
    pub rule: Option<Distilled>,
    /// Whether the model runs on it in the background.
    pub queue: bool,
    /// The tenant's intent types.
    pub types: Vec<String>,
    /// The gate's settings.
    pub rules: GateRules,
}

/// In a write's transaction: writes what the rules found in `message` through the gate, and
/// queues the message for the model as `entry_id` (of turn `turn_seq` of `session`; 0 and
/// empty for a message without a turn). Returns the versions written.
pub fn on_message(
    u: &mut UserData<'_>,
    now: Timestamp,
    plan: &MessagePlan,
    message: &str,
    entry_id: &str,
    session: &str,
    turn_seq: u64,
) -> StorageResult<Vec<IntentAck>> {
    let mut written = Vec::new();
    let turn = (turn_seq > 0).then_some(turn_seq);
    if let Some(rule) = &plan.rule
        && let Verdict::Written(ack) = gate(
            u,
            now,
            now,
            rule,
            Source::Rule,
            message,
            turn,
            &plan.types,
            0,
            &plan.rules,
        )?
    {
        written.push(ack);
    }
    if plan.queue {
        u.put_queued(
            entry_id,
            &engram_storage::types::PendingDistillation {
                task: engram_storage::types::DistilTask::Intent,
                session_id: session.to_owned(),
                turn_seq,
                text: message.to_owned(),
                attempts: 0,
                queued_at: now,
            },
        )?;
    }
    Ok(written)
}

/// The queue id of a turn's message (ids sort by turn).
pub fn turn_entry_id(seq: u64) -> String {
    format!("t{seq:020}")
}

/// The queue id of a message written without a turn (`/write`).
pub fn message_entry_id(request_id: &str) -> String {
    format!("w{request_id}")
}

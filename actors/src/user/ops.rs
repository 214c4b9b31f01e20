//! The transaction bodies of a user's writes: each function runs inside one storage
//! transaction, reads what it needs fresh, applies the memory model, and returns the
//! acknowledgement plus the records it changed (for the actor's cache).
//!
//! Domain rejections (unknown turn, unknown memory) happen before the first write, so a
//! rejected request commits nothing. Embeddings were computed before the transaction
//! ([`Prepared`]); a record is stored with the embedding of the text it is indexed by, or,
//! with the pipeline, with that text queued for embedding in the same transaction.

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{
    AnchorKind, MemoryKind, MemoryRecord, MemoryStatus, PiiLevel, RedactionLevel, ReviewFlag,
    SessionRule, Timestamp, Trigger, Turn, WrittenUnder,
};
use serde_json::json;

use super::prepare::choice_preference;
pub use super::prepare::{Prepared, TurnTexts, topic_phrase};
use crate::error::Error;
use crate::model::conflict::{Resolution, resolve};
use crate::model::formation::{
    Feedback, NewMemory, from_clarification, from_feedback, from_turn, profile,
};
use crate::model::pii;
use crate::model::policy::{
    DAY_MS, REPEATED_CHOICE_THRESHOLD, SESSION_IDLE_MS, SESSION_MAX_TURNS, expiry,
};
use crate::request::user::{
    ClearAck, FeedbackAck, FeedbackRequest, IntentAck, IntentWrite, MemoryAck, MemoryChange,
    MemoryWrite, TurnAck, TurnRequest,
};

/// The stream a turn goes to when the gateway names no session.
pub const DEFAULT_SESSION: &str = "default";
/// How long an expired or deleted record is kept before it is purged.
pub const PURGE_GRACE_MS: i64 = 7 * DAY_MS;

/// The outcome of a transaction body: a value, or a rejection decided before any write.
pub type Outcome<T> = StorageResult<Result<(T, Vec<MemoryRecord>), Error>>;

/// Where and when a write happens.
#[derive(Debug, Clone)]
pub struct WriteScope<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// User.
    pub user: &'a str,
    /// Now.
    pub now: Timestamp,
    /// Session rules (window and retention).
    pub rule: SessionRule,
    /// What was computed before the transaction.
    pub prepared: &'a Prepared,
    /// The lease the write is made under (and fenced by), if the node runs with leases.
    pub lease: Option<WrittenUnder>,
}

/// The text a turn is indexed and embedded by (its episodic memory's).
pub fn turn_text(user_text: &str, assistant_text: &str) -> String {
    if assistant_text.is_empty() {
        user_text.to_owned()
    } else {
        format!("{user_text}\n{assistant_text}")
    }
}

/// The session rule of the memory model with a retention period.
pub fn session_rule(retention_ms: i64) -> SessionRule {
    SessionRule {
        max_turns: SESSION_MAX_TURNS,
        idle_ms: SESSION_IDLE_MS,
        retention_ms,
    }
}

/// Identifiers to anchor: (kind, normalised value) ([`pii::anchors_in`]).
pub type Anchors = [(AnchorKind, String)];

/// Appends a turn (if it succeeded), anchors the identifiers its user text gave, and forms
/// memories from it and its choices.
pub fn append_turn(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &TurnRequest,
    texts: &TurnTexts,
) -> Outcome<TurnAck> {
    let entities = &texts.entities;
    let session_id = req
        .session_id
        .clone()
        .unwrap_or_else(|| DEFAULT_SESSION.to_owned());
    if !req.success {
        let ack = TurnAck {
            written: false,
            session_id,
            seq: None,
            entities: entities.to_vec(),
            memories: Vec::new(),
            intents: Vec::new(),
            distilling: false,
            replayed: false,
        };
        return Ok(Ok((ack, Vec::new())));
    }
    let mut turn = Turn {
        session_id: session_id.clone(),
        seq: 0,
        request_id: req.request_id.clone(),
        trace_id: req.trace_id.clone(),
        route: req.route.map(|r| r.as_str().to_owned()),
        user_text: req.user_text.clone(),
        assistant_text: texts.assistant_text.clone(),
        entities: entities.to_vec(),
        created_at: scope.now,
        written_under: scope.lease.clone(),
        pii_level: texts.pii_level,
    };
    u.append_turn(&mut turn, scope.rule)?;
    record_anchors(u, scope, &texts.anchors)?;
    let origin = Origin::of_turn(&turn);
    let mut changes = Vec::new();
    let mut changed = Vec::new();
    let clarified = req
        .clarification
        .as_ref()
        .map(|c| from_clarification(&c.question, &c.answer, &turn));
    for new in from_turn(&turn, &texts.form, true)
        .into_iter()
        .chain(clarified)
    {
        let (change, records) = apply(u, scope, &origin, new)?;
        changes.push(change);
        changed.extend(records);
    }
    for (topic, value) in &req.choices {
        let count = u.count_choice(topic, value)?;
        if count < REPEATED_CHOICE_THRESHOLD {
            continue;
        }
        let new = profile(&choice_preference(topic, value), Trigger::RepeatedChoice);
        // The third choice forms the preference; each one after it only reinforces it (so a
        // candidate is confirmed by the fourth), never flags a contradiction again.
        let existing = u.records(MemoryKind::Profile)?;
        if count > REPEATED_CHOICE_THRESHOLD
            && !matches!(
                resolve(&new, &existing, &|a, b| scope.prepared.same_topic(a, b)),
                Resolution::Reinforce { .. }
            )
        {
            continue;
        }
        let (change, records) = apply_against(u, scope, &origin, new, existing)?;
        changes.push(change);
        changed.extend(records);
    }
    let ack = TurnAck {
        written: true,
        session_id,
        seq: Some(turn.seq),
        entities: turn.entities,
        memories: changes,
        intents: Vec::new(),
        distilling: false,
        replayed: false,
    };
    Ok(Ok((ack, changed)))
}

/// Records feedback on a turn: a dislike with a corrected SQL and a comment forms a
/// correction; a like activates the episodic memory of the turn; a bare dislike suppresses it.
pub fn feedback(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &FeedbackRequest,
    cached: &[MemoryRecord],
) -> Outcome<FeedbackAck> {
    let session = req.session_id.as_deref().unwrap_or(DEFAULT_SESSION);
    let Some(turn) = u.turn(session, req.turn_seq)? else {
        return Ok(Err(Error::NotFound {
            what: format!("turn {} of session {session}", req.turn_seq),
        }));
    };
    let fb = Feedback {
        liked: req.liked,
        corrected_sql: req.corrected_sql.clone(),
        comment: req.comment.clone(),
    };
    let origin = Origin {
        trace: req.trace_id.clone(),
        ..Origin::of_turn(&turn)
    };
    let mut changes = Vec::new();
    let mut changed = Vec::new();
    for new in from_feedback(&fb, Some(&turn)) {
        let (change, records) = apply(u, scope, &origin, new)?;
        changes.push(change);
        changed.extend(records);
    }
    if changes.is_empty() {
        let episodic = cached.iter().filter(|r| {
            r.kind == MemoryKind::Episodic
                && r.session_id.as_deref() == Some(session)
                && r.turn_id == Some(turn.seq)
                && matches!(r.status, MemoryStatus::Candidate | MemoryStatus::Active)
        });
        for record in episodic {
            let mut record = record.clone();
            if req.liked {
                record.status = MemoryStatus::Active;
                record.confidence = (record.confidence + 0.2).min(1.0);
            } else {
                record.status = MemoryStatus::Suppressed;
                record.valid_to = Some(scope.now);
            }
            record.last_seen_at = scope.now;
            u.put_record(&record)?;
            let action = if req.liked { "activated" } else { "suppressed" };
            changes.push(MemoryChange {
                memory_id: record.memory_id.clone(),
                kind: record.kind,
                action: action.into(),
            });
            changed.push(record);
        }
    }
    Ok(Ok((
        FeedbackAck {
            memories: changes,
            replayed: false,
        },
        changed,
    )))
}

/// Writes a memory directly: creates it (resolving conflicts like formed memories) or, with
/// an id, updates the existing one; anchors the identifiers its text and payload gave.
pub fn write_memory(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &MemoryWrite,
    anchors: &Anchors,
) -> Outcome<MemoryAck> {
    if let Some(id) = &req.memory_id
        && let Some(existing) = find_record(u, id)?
        && existing.kind != req.kind
    {
        return Ok(Err(Error::invalid(
            "kind",
            format!(
                "memory {id} is a {} memory, not {}",
                existing.kind.as_str(),
                req.kind.as_str()
            ),
        )));
    }
    record_anchors(u, scope, anchors)?;
    if let Some(id) = &req.memory_id
        && let Some(existing) = find_record(u, id)?
    {
        let rewritten = existing.summary_text != req.text;
        let mut record = existing;
        record.summary_text = req.text.clone();
        record.payload = req.payload.to_string();
        record.status = req.status;
        record.namespace = req.namespace.clone();
        record.scope = req.scope.clone();
        record.confidence = req.confidence;
        record.salience = req.salience;
        record.valid_from = req.valid_from.or(record.valid_from);
        record.valid_to = req.valid_to;
        record.last_seen_at = scope.now;
        record.expires_at = expiry(record.kind, record.status, record.salience, scope.now);
        classify(&mut record);
        u.put_record(&record)?;
        // The same text keeps its vector (with the pipeline, it is not embedded again).
        if rewritten || !scope.prepared.write_behind || u.embedding(&record.memory_id)?.is_none() {
            scope.prepared.store(
                u,
                record.kind,
                &record.memory_id,
                &record.summary_text,
                scope.now,
            )?;
        }
        let ack = MemoryAck {
            memory: record.clone(),
            action: "updated".into(),
            replayed: false,
        };
        return Ok(Ok((ack, vec![record])));
    }
    let new = NewMemory {
        kind: req.kind,
        summary_text: req.text.clone(),
        payload: req.payload.clone(),
        trigger: Trigger::Api,
        status: req.status,
        confidence: req.confidence,
        salience: req.salience,
        namespace: req.namespace.clone(),
        scope: req.scope.clone(),
    };
    let origin = Origin {
        session: req.session_id.clone(),
        turn: None,
        trace: req.trace_id.clone(),
        route: req.source_route.clone(),
        agent: req.source_agent.clone(),
        memory_id: req.memory_id.clone(),
        valid: (req.valid_from, req.valid_to),
        text: None,
    };
    let (change, records) = apply(u, scope, &origin, new)?;
    let memory = records
        .iter()
        .find(|r| r.memory_id == change.memory_id)
        .cloned()
        .ok_or_else(|| engram_storage::Error::Decode {
            what: "memory record",
            reason: "written record missing".into(),
        })?;
    Ok(Ok((
        MemoryAck {
            memory,
            action: change.action,
            replayed: false,
        },
        records,
    )))
}

/// Records a new version of an intent written by the gateway
/// ([`super::intents::write_version`], without the gate's replace window).
pub fn write_intent(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &IntentWrite,
    max_versions: usize,
) -> Outcome<IntentAck> {
    let ack = super::intents::write_version(
        u,
        scope.now,
        &req.intent_type,
        &req.fields,
        None,
        max_versions,
        None,
    )?;
    Ok(Ok((ack, Vec::new())))
}

/// Deletes a session's turns and row.
pub fn clear_session(u: &mut UserData<'_>, session: &str) -> Outcome<ClearAck> {
    let messages = u
        .last_turns(session, 0)?
        .iter()
        .map(|t| 1 + usize::from(!t.assistant_text.is_empty()))
        .sum();
    match u.delete_session(session)? {
        Some(deleted) => Ok(Ok((
            ClearAck {
                deleted,
                messages,
                replayed: false,
            },
            Vec::new(),
        ))),
        None => Ok(Err(Error::NotFound {
            what: format!("session {session}"),
        })),
    }
}

/// Records the identity anchors of a write (nothing without a key service: the actor counts
/// those before the write).
fn record_anchors(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    anchors: &Anchors,
) -> StorageResult<()> {
    for (kind, value) in anchors {
        u.record_anchor(*kind, value, scope.now)?;
    }
    Ok(())
}

/// Where a formed memory came from.
#[derive(Debug, Clone, Default)]
struct Origin {
    session: Option<String>,
    turn: Option<u64>,
    trace: Option<String>,
    route: Option<String>,
    agent: Option<String>,
    memory_id: Option<String>,
    valid: (Option<Timestamp>, Option<Timestamp>),
    /// The turn's text, which an episodic memory is indexed by.
    text: Option<String>,
}

impl Origin {
    fn of_turn(turn: &Turn) -> Self {
        Origin {
            session: Some(turn.session_id.clone()),
            turn: Some(turn.seq),
            trace: turn.trace_id.clone(),
            route: turn.route.clone(),
            text: Some(turn_text(&turn.user_text, &turn.assistant_text)),
            ..Origin::default()
        }
    }
}

pub(super) fn find_record(
    u: &mut UserData<'_>,
    memory_id: &str,
) -> StorageResult<Option<MemoryRecord>> {
    for kind in MemoryKind::ALL {
        if let Some(record) = u.record(kind, memory_id)? {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

fn next_memory_id(u: &mut UserData<'_>) -> StorageResult<String> {
    let mut header = u.header()?.unwrap_or_default();
    let id = format!("m{:08}", header.next_memory_seq);
    header.next_memory_seq += 1;
    u.put_header(&header)?;
    Ok(id)
}

/// Resolves a new memory against the user's records and writes the outcome.
fn apply(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    origin: &Origin,
    new: NewMemory,
) -> StorageResult<(MemoryChange, Vec<MemoryRecord>)> {
    let existing = if new.kind == MemoryKind::Profile {
        u.records(MemoryKind::Profile)?
    } else {
        Vec::new()
    };
    apply_against(u, scope, origin, new, existing)
}

/// [`apply`] with the user's records of the new memory's kind already read (profile records
/// for a profile memory, none otherwise).
fn apply_against(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    origin: &Origin,
    new: NewMemory,
    existing: Vec<MemoryRecord>,
) -> StorageResult<(MemoryChange, Vec<MemoryRecord>)> {
    let resolution = resolve(&new, &existing, &|a, b| scope.prepared.same_topic(a, b));
    if let Resolution::Reinforce { memory_id } = &resolution
        && let Some(mut record) = existing.into_iter().find(|r| &r.memory_id == memory_id)
    {
        record.last_seen_at = scope.now;
        record.confidence = (record.confidence + 0.1).min(1.0);
        record.salience = (record.salience + 0.1).min(1.0);
        if record.status == MemoryStatus::Candidate && record.confidence >= 0.7 {
            record.status = MemoryStatus::Active;
        }
        record.expires_at = expiry(record.kind, record.status, record.salience, scope.now);
        u.put_record(&record)?;
        let change = MemoryChange {
            memory_id: record.memory_id.clone(),
            kind: record.kind,
            action: "reinforced".into(),
        };
        return Ok((change, vec![record]));
    }
    let memory_id = match &origin.memory_id {
        Some(id) => id.clone(),
        None => next_memory_id(u)?,
    };
    let mut record = MemoryRecord {
        memory_id: memory_id.clone(),
        tenant: scope.tenant.to_owned(),
        user_id: scope.user.to_owned(),
        session_id: origin.session.clone(),
        turn_id: origin.turn,
        trace_id: origin.trace.clone(),
        kind: new.kind,
        scope: new.scope,
        namespace: new.namespace,
        summary_text: new.summary_text,
        payload: new.payload.to_string(),
        source_route: origin.route.clone(),
        source_agent: origin.agent.clone(),
        confidence: new.confidence,
        salience: new.salience,
        status: new.status,
        pii_level: PiiLevel::None,
        redaction_level: RedactionLevel::Full,
        trigger: new.trigger,
        created_at: scope.now,
        last_seen_at: scope.now,
        last_accessed_at: None,
        expires_at: expiry(new.kind, new.status, new.salience, scope.now),
        valid_from: Some(origin.valid.0.unwrap_or(scope.now)),
        valid_to: origin.valid.1,
    };
    classify(&mut record);
    let mut changed = Vec::new();
    let action = match resolution {
        Resolution::Insert | Resolution::Reinforce { .. } => "created",
        Resolution::Supersede { memory_ids } => {
            for old_id in memory_ids {
                if let Some(mut old) = u.record(MemoryKind::Profile, &old_id)? {
                    old.status = MemoryStatus::Suppressed;
                    old.valid_to = Some(scope.now);
                    old.payload = with_field(&old.payload, "superseded_by", &memory_id);
                    u.put_record(&old)?;
                    changed.push(old);
                }
            }
            "superseded"
        }
        Resolution::Flag {
            memory_id: conflicts_with,
            reason,
        } => {
            record.status = MemoryStatus::Suppressed;
            u.put_flag(&ReviewFlag {
                flag_id: memory_id.clone(),
                memory_id: memory_id.clone(),
                conflicts_with,
                reason: reason.to_owned(),
                created_at: scope.now,
            })?;
            "flagged"
        }
    };
    u.put_record(&record)?;
    // A turn's episodic memory is indexed by the turn's text; everything else by its own.
    let text = match &origin.text {
        Some(turn)
            if record.kind == MemoryKind::Episodic && record.trigger == Trigger::SuccessfulTurn =>
        {
            turn.as_str()
        }
        Some(_) | None => record.summary_text.as_str(),
    };
    scope
        .prepared
        .store(u, record.kind, &memory_id, text, scope.now)?;
    let change = MemoryChange {
        memory_id,
        kind: record.kind,
        action: action.into(),
    };
    changed.push(record);
    Ok((change, changed))
}

/// Sets a record's personal-data level from its text and payload; a record with high-level
/// items (ID, bank card, passport numbers) is read as a redacted summary by default.
fn classify(record: &mut MemoryRecord) {
    record.pii_level = pii::level_of([record.summary_text.as_str(), record.payload.as_str()]);
    if record.pii_level == PiiLevel::High && record.redaction_level == RedactionLevel::Full {
        record.redaction_level = RedactionLevel::Summary;
    }
}

/// `payload` (a JSON object) with `key` set to `value`.
fn with_field(payload: &str, key: &str, value: &str) -> String {
    let mut object: serde_json::Value = serde_json::from_str(payload).unwrap_or_else(|_| json!({}));
    if let Some(map) = object.as_object_mut() {
        map.insert(key.to_owned(), json!(value));
    }
    object.to_string()
}

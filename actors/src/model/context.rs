//! Context assembly with no LLM call: the working memory of the session (the last 6 turns raw,
//! older turns as extractive summaries), the profile / episodic / correction slots filled by
//! ranking and capped by the route's budget, the entities mentioned, and a token budget that
//! drops the oldest summaries first and says so. The result has a structured form and a
//! rendered text block ready to put in a prompt.
//!
//! Ranking here is lexical overlap with the query plus recency and decayed salience; the
//! hybrid retrieval of the inference issue (dense + BM25) replaces `rank`.

use std::collections::HashSet;

use engram_storage::model::{MemoryKind, MemoryRecord, MemoryStatus, Timestamp, Turn};
use serde::Serialize;

use super::entities::EntityExtractor;
use super::policy::{DAY_MS, RAW_TURNS, Route, decayed_salience};
use super::text::{count_tokens, extractive_summary};

/// The instruction that closes every rendered context.
pub const NO_INVENTION: &str = "Do not invent memories that are not listed.";

/// What a context is assembled for.
#[derive(Debug, Clone)]
pub struct ContextRequest<'a> {
    /// The question about to be sent to the LLM, if any.
    pub query: Option<&'a str>,
    /// The route, which sets the slot budgets.
    pub route: Route,
    /// Token budget of the whole rendered context.
    pub token_budget: usize,
    /// Now.
    pub now: Timestamp,
}

/// A raw turn in the context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextTurn {
    /// Sequence number.
    pub seq: u64,
    /// The user's text.
    pub user: String,
    /// The assistant's text.
    pub assistant: String,
}

/// An older turn, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextSummary {
    /// Sequence number of the turn.
    pub seq: u64,
    /// The summary.
    pub text: String,
    /// How it was made ("extractive" until a summarising model exists).
    pub method: &'static str,
}

/// A memory in a slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextMemory {
    /// The memory.
    pub memory_id: String,
    /// Its text.
    pub text: String,
    /// Its ranking score.
    pub score: f32,
    /// Corrected SQL, for corrections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected_sql: Option<String>,
}

/// The assembled context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryContext {
    /// Route it was assembled for.
    pub route: &'static str,
    /// The last turns of the session, oldest first.
    pub recent_turns: Vec<ContextTurn>,
    /// Summaries of older turns, oldest first.
    pub summaries: Vec<ContextSummary>,
    /// Profile slot.
    pub profile: Vec<ContextMemory>,
    /// Episodic slot.
    pub episodic: Vec<ContextMemory>,
    /// Correction slot.
    pub corrections: Vec<ContextMemory>,
    /// Entities mentioned in the session and the query.
    pub entities: Vec<String>,
    /// Estimated tokens of `text`.
    pub tokens: usize,
    /// The budget it was fitted to.
    pub token_budget: usize,
    /// Whether anything was dropped to fit the budget.
    pub truncated: bool,
    /// What was dropped, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The rendered block for the prompt.
    pub text: String,
}

/// A memory record with its search words, computed once when the record is loaded or written
/// rather than on every context read.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedRecord {
    /// The record.
    pub record: MemoryRecord,
    /// The words of its text, as [`EntityExtractor::tokens`] splits them.
    pub words: HashSet<String>,
}

impl IndexedRecord {
    /// Indexes `record`.
    pub fn new(record: MemoryRecord, extractor: &EntityExtractor) -> Self {
        let words = extractor.tokens(&record.summary_text).into_iter().collect();
        IndexedRecord { record, words }
    }
}

/// Assembles the context of a session. `turns` are the session's current window, oldest
/// first; `records` are the user's memory records of every kind (filtered here by status,
/// expiry and kind).
pub fn assemble(
    request: &ContextRequest<'_>,
    turns: &[Turn],
    records: &[&IndexedRecord],
    extractor: &EntityExtractor,
) -> MemoryContext {
    let split = turns.len().saturating_sub(RAW_TURNS);
    let (older, recent) = turns.split_at(split);
    let summaries: Vec<ContextSummary> = older
        .iter()
        .map(|t| ContextSummary {
            seq: t.seq,
            text: extractive_summary(&t.user_text, &t.assistant_text, &t.entities),
            method: "extractive",
        })
        .collect();
    let recent_turns: Vec<ContextTurn> = recent
        .iter()
        .map(|t| ContextTurn {
            seq: t.seq,
            user: t.user_text.clone(),
            assistant: t.assistant_text.clone(),
        })
        .collect();

    let query_tokens: HashSet<String> = request
        .query
        .map(|q| extractor.tokens(q).into_iter().collect())
        .unwrap_or_default();
    let budget = request.route.budget();
    // Episodic memories of turns already in the working memory would repeat them.
    let in_window: HashSet<(&str, u64)> = turns
        .iter()
        .map(|t| (t.session_id.as_str(), t.seq))
        .collect();
    let records: Vec<&IndexedRecord> = records
        .iter()
        .copied()
        .filter(|r| match (&r.record.session_id, r.record.turn_id) {
            (Some(session), Some(seq)) if r.record.kind == MemoryKind::Episodic => {
                !in_window.contains(&(session.as_str(), seq))
            }
            (Some(_), Some(_)) => true,
            (Some(_) | None, None) | (None, Some(_)) => true,
        })
        .collect();
    let rank_kind = |kind, cap| {
        rank(
            records.iter().copied(),
            kind,
            &query_tokens,
            request.now,
            cap,
        )
    };
    let profile = rank_kind(MemoryKind::Profile, budget.profile);
    let episodic = rank_kind(MemoryKind::Episodic, budget.episodic);
    let corrections = rank_kind(MemoryKind::Correction, budget.correction);

    let mut entities: Vec<String> = Vec::new();
    for e in turns.iter().flat_map(|t| t.entities.iter().cloned()).chain(
        request
            .query
            .map(|q| extractor.extract(q))
            .unwrap_or_default(),
    ) {
        if !entities.contains(&e) {
            entities.push(e);
        }
    }

    let mut ctx = MemoryContext {
        route: request.route.as_str(),
        recent_turns,
        summaries,
        profile,
        episodic,
        corrections,
        entities,
        tokens: 0,
        token_budget: request.token_budget,
        truncated: false,
        dropped: Vec::new(),
        text: String::new(),
    };
    let mut dropped_summaries = 0;
    ctx.text = render(&ctx, &[]);
    // Over budget: the oldest summaries go first, then the lowest-ranked memories (episodic,
    // then profile, then corrections), then the oldest raw turns.
    while count_tokens(&ctx.text) > request.token_budget {
        if !ctx.summaries.is_empty() {
            ctx.summaries.remove(0);
            dropped_summaries += 1;
        } else if ctx.episodic.pop().is_some() {
            ctx.dropped.push("an episodic memory".to_owned());
        } else if ctx.profile.pop().is_some() {
            ctx.dropped.push("a profile memory".to_owned());
        } else if ctx.corrections.pop().is_some() {
            ctx.dropped.push("a correction".to_owned());
        } else if ctx.recent_turns.len() > 1 {
            ctx.recent_turns.remove(0);
            ctx.dropped.push("a recent turn".to_owned());
        } else {
            break;
        }
        let note = drop_note(dropped_summaries, &ctx.dropped, request.token_budget);
        ctx.text = render(&ctx, &note);
    }
    if dropped_summaries > 0 {
        ctx.dropped
            .insert(0, format!("{dropped_summaries} oldest turn summaries"));
    }
    ctx.tokens = count_tokens(&ctx.text);
    ctx.truncated = !ctx.dropped.is_empty();
    ctx
}

fn drop_note(summaries: usize, others: &[String], budget: usize) -> Vec<String> {
    let mut parts = Vec::new();
    if summaries > 0 {
        parts.push(format!("{summaries} oldest turn summaries"));
    }
    if !others.is_empty() {
        parts.push(format!("{} further items", others.len()));
    }
    vec![format!(
        "(Context truncated to fit {budget} tokens: dropped {}.)",
        parts.join(" and ")
    )]
}

/// Whether a record may appear in a context at `now`.
pub fn is_live(record: &MemoryRecord, now: Timestamp) -> bool {
    matches!(
        record.status,
        MemoryStatus::Active | MemoryStatus::Candidate
    ) && record.expires_at.is_none_or(|at| at > now)
}

fn rank<'r>(
    records: impl IntoIterator<Item = &'r IndexedRecord>,
    kind: MemoryKind,
    query: &HashSet<String>,
    now: Timestamp,
    cap: usize,
) -> Vec<ContextMemory> {
    if cap == 0 {
        return Vec::new();
    }
    let mut scored: Vec<(f32, &MemoryRecord)> = records
        .into_iter()
        .filter(|r| r.record.kind == kind && is_live(&r.record, now))
        .map(|indexed| {
            let r = &indexed.record;
            let overlap = if query.is_empty() {
                0.0
            } else {
                query.intersection(&indexed.words).count() as f32 / query.len() as f32
            };
            let age_days = (now.0 - r.last_seen_at.0).max(0) as f32 / DAY_MS as f32;
            let recency = 1.0 / (1.0 + age_days / 7.0);
            let salience = decayed_salience(kind, r.salience, r.last_seen_at, now);
            (0.6 * overlap + 0.2 * recency + 0.2 * salience, r)
        })
        .collect();
    // Best first; ties go to the newest (corrections are listed newest first).
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(b.1.created_at.cmp(&a.1.created_at))
    });
    scored
        .into_iter()
        .take(cap)
        .map(|(score, r)| ContextMemory {
            memory_id: r.memory_id.clone(),
            text: r.summary_text.clone(),
            score,
            corrected_sql: serde_json::from_str::<serde_json::Value>(&r.payload)
                .ok()
                .and_then(|p| {
                    p.get("corrected_sql")
                        .and_then(|s| s.as_str())
                        .map(str::to_owned)
                }),
        })
        .collect()
}

/// The prompt block of `ctx`'s sections, with `notes` before the closing instruction.
fn render(ctx: &MemoryContext, notes: &[String]) -> String {
    use std::fmt::Write;
    let mut out = format!("## User memory (route {})\n", ctx.route);
    let mut section = |title: &str, items: &mut dyn Iterator<Item = String>| {
        let items: Vec<String> = items.collect();
        if !items.is_empty() {
            let _ = writeln!(out, "### {title}");
            for item in items {
                let _ = writeln!(out, "- {item}");
            }
        }
    };
    section(
        "Preferences and facts",
        &mut ctx.profile.iter().map(|m| m.text.clone()),
    );
    section(
        "Corrections (newest first; follow them)",
        &mut ctx.corrections.iter().map(|m| match &m.corrected_sql {
            Some(sql) => format!("{} (corrected SQL: {sql})", m.text),
            None => m.text.clone(),
        }),
    );
    section(
        "Past interactions",
        &mut ctx.episodic.iter().map(|m| m.text.clone()),
    );
    section(
        "Earlier in this session (extractive summaries)",
        &mut ctx.summaries.iter().map(|s| s.text.clone()),
    );
    section(
        "Recent turns",
        &mut ctx
            .recent_turns
            .iter()
            .map(|t| format!("user: {}\n  assistant: {}", t.user, t.assistant)),
    );
    if !ctx.entities.is_empty() {
        let _ = writeln!(out, "### Entities mentioned\n{}", ctx.entities.join(", "));
    }
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    out.push_str(NO_INVENTION);
    out
}

#[cfg(test)]
mod tests;

//! Context assembly with no LLM call: the working memory of the session (the last 6 turns raw,
//! older turns as summaries: the model's when stored, else extractive), the profile / episodic / correction slots filled by
//! ranking and capped by the route's budget, the entities mentioned, and a token budget that
//! drops the oldest summaries first and says so. The result has a structured form and a
//! rendered text block ready to put in a prompt.
//!
//! The slots are ranked by the user's [`MemoryIndex`]: hybrid retrieval fusing the query's
//! embedding, BM25 over its words, recency and salience; with no query, by recency and
//! salience alone. The correction slot then keeps the newest [`MAX_CORRECTIONS`] of the
//! route's most relevant corrections, newest first.

use engram_storage::schema::SchemaEntry;
use engram_storage::types::{
    Intent, MemoryKind, MemoryRecord, MemoryStatus, PiiLevel, RedactionLevel, Timestamp, Turn,
};
use engram_storage::vector::VectorError;
use serde::{Deserialize, Serialize};

use super::entities::EntityExtractor;
use super::index::{MemoryIndex, MemoryQuery};
pub use super::pii::gateway_text;
pub use super::policy::is_live;

use super::policy::{RAW_TURNS, Route};
use super::retrieve::SearchMode;
use super::text::{count_tokens, extractive_summary, truncate_chars};

/// Corrections a context shows at most, newest first: of the route's most relevant ones
/// (its correction budget), the newest.
pub const MAX_CORRECTIONS: usize = 3;

/// The instruction that closes every rendered context.
pub const NO_INVENTION: &str = "Do not invent memories that are not listed.";
/// The smallest token budget a context accepts: its header, the note saying what was
/// dropped and [`NO_INVENTION`] fit in it, so from here up a context never exceeds its budget.
pub const MIN_TOKEN_BUDGET: usize = 64;

/// What a context is assembled for.
#[derive(Debug, Clone)]
pub struct ContextRequest<'a> {
    /// The question about to be sent to the LLM, if any.
    pub query: Option<&'a str>,
    /// The question's embedding (query role), if the node embeds.
    pub query_vector: Option<&'a [f32]>,
    /// The route, which sets the slot budgets.
    pub route: Route,
    /// Token budget of the whole rendered context.
    pub token_budget: usize,
    /// Now.
    pub now: Timestamp,
    /// Withhold the user's high-PII turns and memories (the reader is past the sensitive-read
    /// breaker's limit): they are named, not shown.
    pub withhold_sensitive: bool,
    /// The current versions of the user's key intent types, newest first.
    pub intents: &'a [Intent],
    /// The model's stored summaries of the session's turns, by sequence number.
    pub summaries: &'a [(u64, String)],
    /// Where the raw turns start among the turns (earlier ones are summarised); `None`: the
    /// last [`RAW_TURNS`].
    pub raw_from: Option<usize>,
    /// The tenant's cached schema metadata (shown in nl2sql contexts for the tables
    /// mentioned).
    pub tables: &'a [SchemaEntry],
}

/// The text standing in for a withheld high-PII item.
const WITHHELD_SENSITIVE: &str = "[withheld: sensitive-read limit reached]";

/// A raw turn in the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextTurn {
    /// Sequence number.
    pub seq: u64,
    /// The user's text.
    pub user: String,
    /// The assistant's text.
    pub assistant: String,
}

/// An older turn, summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSummary {
    /// Sequence number of the turn.
    pub seq: u64,
    /// The summary.
    pub text: String,
    /// How it was made: `model` (the generative model's stored summary) or `extractive`
    /// (until the model's is stored, or when it failed).
    pub method: String,
}

/// A memory in a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextMemory {
    /// The memory.
    pub memory_id: String,
    /// Its text.
    pub text: String,
    /// Its ranking score.
    pub score: f32,
    /// Corrected SQL, for corrections.
    pub corrected_sql: Option<String>,
    /// Active, or a candidate not yet confirmed.
    pub status: MemoryStatus,
    /// How sure the memory model is of it (0 to 1): as formed, raised by likes and
    /// reinforcement.
    #[serde(default)]
    pub confidence: f32,
}

/// A current distilled intent in the context's key-intents slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextIntent {
    /// Its type.
    pub intent_type: String,
    /// What it is about (masked).
    pub target: String,
    /// How urgent (`low`, `medium`, `high`), when known.
    pub priority: Option<String>,
    /// Its version (ms since the epoch).
    pub version: i64,
}

/// The assembled context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryContext {
    /// Route it was assembled for.
    pub route: String,
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
    /// Key-intents slot: the current version of each key intent type, newest first.
    #[serde(default)]
    pub intents: Vec<ContextIntent>,
    /// Entities mentioned in the session and the query.
    pub entities: Vec<String>,
    /// Estimated tokens of `text`.
    pub tokens: usize,
    /// The budget it was fitted to.
    pub token_budget: usize,
    /// Whether anything was dropped to fit the budget.
    pub truncated: bool,
    /// What was dropped, in words.
    #[serde(default)]
    pub dropped: Vec<String>,
    /// The rendered block for the prompt.
    pub text: String,
    /// Whether it shows (or withholds, past the limit) the user's high-PII turns or memories:
    /// a read the sensitive-read breaker counts for non-admins.
    #[serde(default)]
    pub sensitive: bool,
    /// Whether the query was embedded and its vector used in ranking.
    #[serde(default)]
    pub query_embedded: bool,
    /// Why a query was ranked without its vector (by words and priors), if it was.
    #[serde(default)]
    pub fallback: Option<super::fallback::Fallback>,
    /// nl2sql contexts: the tenant's cached metadata of the tables the query or the session
    /// mentions.
    #[serde(default)]
    pub tables: Vec<ContextTable>,
}

/// A table's cached metadata in a context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextTable {
    /// The table.
    pub name: String,
    /// Its metadata as the gateway cached it (JSON), at most [`TABLE_METADATA_CHARS`].
    pub metadata: String,
}

/// Characters of a table's cached metadata a context shows at most.
pub const TABLE_METADATA_CHARS: usize = 600;

/// Assembles the context of a session. `turns` are the session's current window, oldest
/// first; `index` holds the user's memory records of every kind (filtered here by status,
/// expiry and kind). Fails only on a query vector the index cannot take.
pub fn assemble(
    request: &ContextRequest<'_>,
    turns: &[Turn],
    index: &MemoryIndex,
    extractor: &EntityExtractor,
) -> Result<MemoryContext, VectorError> {
    let withheld = |level: PiiLevel| request.withhold_sensitive && level == PiiLevel::High;
    let split = request
        .raw_from
        .unwrap_or_else(|| turns.len().saturating_sub(RAW_TURNS))
        .min(turns.len());
    let (older, recent) = turns.split_at(split);
    let summaries: Vec<ContextSummary> = older
        .iter()
        .map(|t| {
            let stored = request
                .summaries
                .iter()
                .find(|(seq, _)| *seq == t.seq)
                .map(|(_, text)| text.as_str());
            let (text, method) = match stored {
                Some(text) => (text.to_owned(), "model"),
                // Masked before it is cut: a cut through a number leaves a head that no
                // longer reads as one.
                None => (
                    extractive_summary(
                        &gateway_text(&t.user_text),
                        &gateway_text(&t.assistant_text),
                        &t.entities,
                    ),
                    "extractive",
                ),
            };
            ContextSummary {
                seq: t.seq,
                text: if withheld(t.pii_level) {
                    WITHHELD_SENSITIVE.to_owned()
                } else {
                    gateway_text(&text)
                },
                method: method.to_owned(),
            }
        })
        .collect();
    let recent_turns: Vec<ContextTurn> = recent
        .iter()
        .map(|t| {
            let text = |s: &str| {
                if withheld(t.pii_level) {
                    WITHHELD_SENSITIVE.to_owned()
                } else {
                    gateway_text(s)
                }
            };
            ContextTurn {
                seq: t.seq,
                user: text(&t.user_text),
                assistant: text(&t.assistant_text),
            }
        })
        .collect();

    let budget = request.route.budget();
    // Episodic memories of turns already in the working memory would repeat them.
    let in_window: Vec<(&str, u64)> = turns
        .iter()
        .map(|t| (t.session_id.as_str(), t.seq))
        .collect();
    let slot = |kind: MemoryKind, cap: usize| -> Result<Vec<(&MemoryRecord, f32)>, VectorError> {
        if cap == 0 {
            return Ok(Vec::new());
        }
        let query = MemoryQuery {
            text: request.query.unwrap_or(""),
            vector: request.query_vector,
            k: cap,
            mode: SearchMode::Hybrid,
            now: request.now,
            kinds: &[kind],
            exclude_turns: &in_window,
            fill: true,
            // An inferred preference steers every answer: served once confirmed. Episodic
            // memories and corrections are served as candidates too (docs: the status rule).
            active_only: kind == MemoryKind::Profile,
        };
        index.search(extractor, &query)
    };
    let shown = |found: Vec<(&MemoryRecord, f32)>| -> Vec<ContextMemory> {
        found
            .into_iter()
            .map(|(r, score)| context_memory(r, score, withheld(r.pii_level)))
            .collect()
    };
    let profile = shown(slot(MemoryKind::Profile, budget.profile)?);
    let episodic = shown(slot(MemoryKind::Episodic, budget.episodic)?);
    // The route's most relevant corrections; of those the newest few, newest first (a later
    // correction of the same thing comes before the one it corrects).
    let mut corrections = slot(MemoryKind::Correction, budget.correction)?;
    corrections.sort_by(|(a, _), (b, _)| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.memory_id.cmp(&a.memory_id))
    });
    corrections.truncate(MAX_CORRECTIONS);
    let corrections = shown(corrections);

    let mut entities: Vec<String> = Vec::new();
    for e in turns.iter().flat_map(|t| t.entities.iter().cloned()).chain(
        request
            .query
            .map(|q| extractor.extract(q))
            .unwrap_or_default(),
    ) {
        let e = gateway_text(&e);
        if !entities.contains(&e) {
            entities.push(e);
        }
    }

    let tables = if request.route == Route::Nl2sqlQuery {
        let query = request.query.unwrap_or("").to_lowercase();
        request
            .tables
            .iter()
            .filter(|t| {
                let name = t.name.to_lowercase();
                query.contains(&name) || entities.iter().any(|e| e.to_lowercase() == name)
            })
            .map(|t| ContextTable {
                name: t.name.clone(),
                metadata: truncate_chars(&t.content, TABLE_METADATA_CHARS),
            })
            .collect()
    } else {
        Vec::new()
    };

    let intents = request
        .intents
        .iter()
        .map(|i| ContextIntent {
            intent_type: i.intent_type.clone(),
            target: gateway_text(&super::intent::target_of(i)),
            priority: super::intent::priority_of(i).map(|p| p.as_str().to_owned()),
            version: i.version.0,
        })
        .collect();
    let mut ctx = MemoryContext {
        route: request.route.as_str().to_owned(),
        recent_turns,
        summaries,
        profile,
        episodic,
        corrections,
        intents,
        entities,
        tokens: 0,
        token_budget: request.token_budget,
        truncated: false,
        dropped: Vec::new(),
        text: String::new(),
        sensitive: false,
        query_embedded: request.query_vector.is_some(),
        fallback: None,
        tables,
    };
    let mut dropped_summaries = 0;
    ctx.text = render(&ctx, &[]);
    // Over budget: the oldest summaries go first, then the lowest-ranked episodic memories,
    // then tables' metadata, then profile memories, then the oldest intents, then
    // corrections, then the oldest raw turns.
    while count_tokens(&ctx.text) > request.token_budget {
        if !ctx.summaries.is_empty() {
            ctx.summaries.remove(0);
            dropped_summaries += 1;
        } else if ctx.episodic.pop().is_some() {
            ctx.dropped.push("an episodic memory".to_owned());
        } else if ctx.tables.pop().is_some() {
            ctx.dropped.push("a table's metadata".to_owned());
        } else if ctx.profile.pop().is_some() {
            ctx.dropped.push("a profile memory".to_owned());
        } else if ctx.intents.pop().is_some() {
            ctx.dropped.push("an intent".to_owned());
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
    if count_tokens(&ctx.text) > request.token_budget {
        fit_newest_turn(&mut ctx, dropped_summaries, request.token_budget);
    }
    if dropped_summaries > 0 {
        ctx.dropped
            .insert(0, format!("{dropped_summaries} oldest turn summaries"));
    }
    ctx.tokens = count_tokens(&ctx.text);
    ctx.truncated = !ctx.dropped.is_empty();
    Ok(ctx)
}

/// The context is still over `budget` with only its newest turn left: cut that turn's texts
/// to the longest length that fits (the same cap for both, so the longer one gives most), or
/// leave the turn out, then the entities. From [`MIN_TOKEN_BUDGET`] up, what remains (the
/// header, the truncation note and the closing line) always fits.
fn fit_newest_turn(ctx: &mut MemoryContext, dropped_summaries: usize, budget: usize) {
    let rerender = |ctx: &mut MemoryContext| {
        let note = drop_note(dropped_summaries, &ctx.dropped, budget);
        ctx.text = render(ctx, &note);
        count_tokens(&ctx.text) <= budget
    };
    if let Some(turn) = ctx.recent_turns.pop() {
        ctx.dropped.push("part of a recent turn".to_owned());
        let longest = turn
            .user
            .chars()
            .count()
            .max(turn.assistant.chars().count());
        let cut = |cap: usize| ContextTurn {
            seq: turn.seq,
            user: truncate_chars(&turn.user, cap),
            assistant: truncate_chars(&turn.assistant, cap),
        };
        let fits = |ctx: &mut MemoryContext, cap: usize| {
            ctx.recent_turns.push(cut(cap));
            let fits = rerender(ctx);
            ctx.recent_turns.pop();
            fits
        };
        if fits(ctx, 1) {
            // The longest cap that fits, by bisection (tokens grow with the cap).
            let (mut lo, mut hi) = (1, longest.max(1));
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(ctx, mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            ctx.recent_turns.push(cut(lo));
        } else {
            ctx.dropped.pop();
            ctx.dropped.push("a recent turn".to_owned());
        }
        if rerender(ctx) {
            return;
        }
    }
    if !ctx.entities.is_empty() {
        ctx.entities.clear();
        ctx.dropped.push("the entities".to_owned());
        rerender(ctx);
    }
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

/// Whether `ctx` shows any of the user's high-PII turns or memories (what the sensitive-read
/// breaker counts); `turns` are the ones it was assembled from.
pub fn is_sensitive(ctx: &MemoryContext, turns: &[Turn], index: &MemoryIndex) -> bool {
    let shown_turn = |seq: u64| {
        ctx.recent_turns.iter().any(|t| t.seq == seq) || ctx.summaries.iter().any(|s| s.seq == seq)
    };
    turns
        .iter()
        .any(|t| t.pii_level == PiiLevel::High && shown_turn(t.seq))
        || ctx
            .profile
            .iter()
            .chain(&ctx.episodic)
            .chain(&ctx.corrections)
            .any(|m| {
                index
                    .get(&m.memory_id)
                    .is_some_and(|r| r.pii_level == PiiLevel::High)
            })
}

fn context_memory(r: &MemoryRecord, score: f32, sensitive_withheld: bool) -> ContextMemory {
    if sensitive_withheld || r.redaction_level == RedactionLevel::ReferenceOnly {
        let why = if sensitive_withheld {
            "sensitive-read limit reached"
        } else {
            "personal data"
        };
        return ContextMemory {
            memory_id: r.memory_id.clone(),
            text: format!("[memory {} withheld: {why}]", r.memory_id),
            score,
            corrected_sql: None,
            status: r.status,
            confidence: r.confidence,
        };
    }
    ContextMemory {
        memory_id: r.memory_id.clone(),
        text: gateway_text(&r.summary_text),
        score,
        corrected_sql: serde_json::from_str::<serde_json::Value>(&r.payload)
            .ok()
            .and_then(|p| {
                p.get("corrected_sql")
                    .and_then(|s| s.as_str())
                    .map(gateway_text)
            }),
        status: r.status,
        confidence: r.confidence,
    }
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
        "Open intents (newest first)",
        &mut ctx.intents.iter().map(|i| {
            let priority = i
                .priority
                .as_deref()
                .map(|p| format!(", priority {p}"))
                .unwrap_or_default();
            if i.target.is_empty() {
                format!("{}{priority}", i.intent_type)
            } else {
                format!("{}: {}{priority}", i.intent_type, i.target)
            }
        }),
    );
    section(
        "Table metadata (cached)",
        &mut ctx
            .tables
            .iter()
            .map(|t| format!("{}: {}", t.name, t.metadata)),
    );
    section(
        "Past interactions",
        &mut ctx.episodic.iter().map(|m| m.text.clone()),
    );
    section(
        "Earlier in this session (summaries)",
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

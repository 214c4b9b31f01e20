//! The fixed policies of the memory model (docs/architecture.md, "Memory model"): TTLs and
//! salience decay per layer, the per-route slot budgets of the context, and the working-memory
//! limits.

use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus, Timestamp};

/// One day in milliseconds.
pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Turns shown raw in a context; older turns are summarised.
pub const RAW_TURNS: usize = 6;
/// A session closes after this many turns (the next turn opens a new one).
pub const SESSION_MAX_TURNS: u32 = 20;
/// A session closes after this long idle.
pub const SESSION_IDLE_MS: i64 = DAY_MS;
/// The assistant's text is capped at this many characters when written back.
pub const ASSISTANT_TEXT_CAP: usize = 2_000;
/// Default token budget of a context.
pub const DEFAULT_TOKEN_BUDGET: usize = 1_200;
/// The same choice made this many times becomes a profile candidate.
pub const REPEATED_CHOICE_THRESHOLD: u64 = 3;

/// TTL and decay of one memory layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KindPolicy {
    /// Time to live from the last time the memory was seen; `None` = no TTL of its own.
    pub ttl_ms: Option<i64>,
    /// Salience lost per day since the memory was last seen.
    pub decay_per_day: f32,
}

/// The policy of `kind`.
pub fn kind_policy(kind: MemoryKind) -> KindPolicy {
    match kind {
        MemoryKind::Working => KindPolicy {
            ttl_ms: Some(SESSION_IDLE_MS),
            decay_per_day: 0.0,
        },
        MemoryKind::Profile => KindPolicy {
            ttl_ms: Some(365 * DAY_MS),
            decay_per_day: 0.005,
        },
        MemoryKind::Episodic => KindPolicy {
            ttl_ms: Some(90 * DAY_MS),
            decay_per_day: 0.02,
        },
        MemoryKind::Correction => KindPolicy {
            ttl_ms: Some(180 * DAY_MS),
            decay_per_day: 0.0,
        },
    }
}

/// When a memory of `kind` last seen at `seen` expires.
pub fn expires_at(kind: MemoryKind, seen: Timestamp) -> Option<Timestamp> {
    kind_policy(kind).ttl_ms.map(|ttl| seen.plus_millis(ttl))
}

/// When a memory last seen at `seen` expires: its layer's TTL from then; a candidate (never
/// confirmed) also expires once its salience has decayed to zero, if that comes first. An
/// active memory fades in ranking ([`decayed_salience`]) but lives its whole TTL.
pub fn expiry(
    kind: MemoryKind,
    status: MemoryStatus,
    salience: f32,
    seen: Timestamp,
) -> Option<Timestamp> {
    let ttl = expires_at(kind, seen);
    let per_day = kind_policy(kind).decay_per_day;
    if status != MemoryStatus::Candidate || per_day <= 0.0 {
        return ttl;
    }
    let days = f64::from(salience.max(0.0)) / f64::from(per_day);
    let faded = seen.plus_millis((days * DAY_MS as f64).ceil() as i64);
    Some(ttl.map_or(faded, |ttl| ttl.min(faded)))
}

/// Salience after linear decay from `last_seen` to `now`, never below zero.
pub fn decayed_salience(
    kind: MemoryKind,
    salience: f32,
    last_seen: Timestamp,
    now: Timestamp,
) -> f32 {
    decay(
        salience,
        kind_policy(kind).decay_per_day,
        now.0 - last_seen.0,
    )
}

/// `salience` after `per_day` of linear decay for `age_ms`, never below zero.
pub fn decay(salience: f32, per_day: f32, age_ms: i64) -> f32 {
    (salience - per_day * age_ms.max(0) as f32 / DAY_MS as f32).max(0.0)
}

/// The routes a gateway may name, each with its slot budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Route {
    /// Natural language to SQL.
    Nl2sqlQuery,
    /// A single KPI.
    KpiLookup,
    /// Questions about the business.
    BusinessKnowledgeQa,
    /// Multi-step analysis.
    DeepAnalysisWorkflow,
}

/// How many memories of each kind a context may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotBudget {
    /// Profile memories.
    pub profile: usize,
    /// Episodic memories.
    pub episodic: usize,
    /// Corrections.
    pub correction: usize,
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 4] = [
        Route::Nl2sqlQuery,
        Route::KpiLookup,
        Route::BusinessKnowledgeQa,
        Route::DeepAnalysisWorkflow,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Nl2sqlQuery => "nl2sql_query",
            Route::KpiLookup => "kpi_lookup",
            Route::BusinessKnowledgeQa => "business_knowledge_qa",
            Route::DeepAnalysisWorkflow => "deep_analysis_workflow",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The slot budget of this route.
    pub fn budget(self) -> SlotBudget {
        let (profile, episodic, correction) = match self {
            Route::Nl2sqlQuery => (5, 2, 5),
            Route::KpiLookup => (2, 0, 1),
            Route::BusinessKnowledgeQa => (3, 1, 1),
            Route::DeepAnalysisWorkflow => (8, 8, 4),
        };
        SlotBudget {
            profile,
            episodic,
            correction,
        }
    }
}

/// Whether a record may appear in a context at `now`.
pub fn is_live(record: &MemoryRecord, now: Timestamp) -> bool {
    matches!(
        record.status,
        MemoryStatus::Active | MemoryStatus::Candidate
    ) && record.expires_at.is_none_or(|at| at > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_and_decay_follow_the_design_table() {
        let t0 = Timestamp(0);
        assert_eq!(
            expires_at(MemoryKind::Profile, t0),
            Some(Timestamp(365 * DAY_MS))
        );
        assert_eq!(
            expires_at(MemoryKind::Episodic, t0),
            Some(Timestamp(90 * DAY_MS))
        );
        assert_eq!(
            expires_at(MemoryKind::Correction, t0),
            Some(Timestamp(180 * DAY_MS))
        );
        let ten_days = Timestamp(10 * DAY_MS);
        assert!((decayed_salience(MemoryKind::Episodic, 0.5, t0, ten_days) - 0.3).abs() < 1e-6);
        assert!((decayed_salience(MemoryKind::Profile, 0.5, t0, ten_days) - 0.45).abs() < 1e-6);
        assert_eq!(
            decayed_salience(MemoryKind::Correction, 0.5, t0, ten_days),
            0.5
        );
        assert_eq!(
            decayed_salience(MemoryKind::Episodic, 0.5, t0, Timestamp(400 * DAY_MS)),
            0.0
        );
    }

    #[test]
    fn routes_parse_and_carry_their_budgets() {
        for route in Route::ALL {
            assert_eq!(Route::parse(route.as_str()), Some(route));
        }
        assert_eq!(Route::parse("nl2sql"), None);
        assert_eq!(
            Route::KpiLookup.budget(),
            SlotBudget {
                profile: 2,
                episodic: 0,
                correction: 1
            }
        );
        assert_eq!(Route::DeepAnalysisWorkflow.budget().episodic, 8);
    }

    #[test]
    fn a_candidate_expires_once_its_salience_decayed_away_and_an_active_one_at_its_ttl() {
        let t0 = Timestamp(1_000);
        // Within a second of `t0` + `days` (salience and decay are f32).
        let about = |at: Option<Timestamp>, days: i64| {
            let want = t0.plus_millis(days * DAY_MS).0;
            at.is_some_and(|at| (at.0 - want).abs() < 1_000)
        };
        // Episodic: 0.5 / 0.02 a day = 25 days, before the 90-day TTL.
        assert!(about(
            expiry(MemoryKind::Episodic, MemoryStatus::Candidate, 0.5, t0),
            25
        ));
        assert!(about(
            expiry(MemoryKind::Episodic, MemoryStatus::Active, 0.5, t0),
            90
        ));
        // Profile: 0.6 / 0.005 = 120 days, before the 365-day TTL; a salient candidate
        // lives its TTL; corrections do not decay.
        assert!(about(
            expiry(MemoryKind::Profile, MemoryStatus::Candidate, 0.6, t0),
            120
        ));
        assert!(about(
            expiry(MemoryKind::Profile, MemoryStatus::Candidate, 1.0, t0),
            200
        ));
        assert!(about(
            expiry(MemoryKind::Correction, MemoryStatus::Candidate, 0.8, t0),
            180
        ));
    }
}

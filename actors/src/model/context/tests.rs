//! Tests of context assembly and its token budget.

use std::sync::LazyLock;

use engram_storage::types::{
    MemoryKind, MemoryRecord, MemoryStatus, PiiLevel, RedactionLevel, Timestamp, Trigger, Turn,
};
use proptest::prelude::*;

use super::*;
use crate::model::index::MemoryIndex;

static EXTRACTOR: LazyLock<EntityExtractor> = LazyLock::new(EntityExtractor::default);

fn turns(n: u64) -> Vec<Turn> {
    (0..n)
        .map(|i| Turn {
            session_id: "s".into(),
            seq: i,
            request_id: format!("r{i}"),
            trace_id: None,
            route: None,
            user_text: format!("Question {i} about GMV in dw_orders for East China"),
            assistant_text: format!(
                "The GMV was {i}00 yuan last month, up 3% on the month before it."
            ),
            entities: vec!["GMV".into(), "dw_orders".into()],
            created_at: Timestamp(i as i64),
            written_under: None,
            pii_level: engram_storage::types::PiiLevel::None,
        })
        .collect()
}

fn rec(id: &str, kind: MemoryKind, text: &str, status: MemoryStatus, created: i64) -> MemoryRecord {
    raw(id, kind, text, status, created)
}

/// An index of `records` (no vectors: BM25 and the priors rank).
fn index(records: impl IntoIterator<Item = MemoryRecord>) -> MemoryIndex {
    let mut index = MemoryIndex::default();
    for r in records {
        index.upsert(&EXTRACTOR, r, None, None).unwrap();
    }
    index
}

fn raw(id: &str, kind: MemoryKind, text: &str, status: MemoryStatus, created: i64) -> MemoryRecord {
    MemoryRecord {
        memory_id: id.into(),
        tenant: "t".into(),
        user_id: "u".into(),
        session_id: None,
        turn_id: None,
        trace_id: None,
        kind,
        scope: "global".into(),
        namespace: "default".into(),
        summary_text: text.into(),
        payload: "{}".into(),
        source_route: None,
        source_agent: None,
        confidence: 0.5,
        salience: 0.5,
        status,
        pii_level: PiiLevel::None,
        redaction_level: RedactionLevel::Full,
        trigger: Trigger::Api,
        created_at: Timestamp(created),
        last_seen_at: Timestamp(created),
        last_accessed_at: None,
        expires_at: None,
        valid_from: None,
        valid_to: None,
    }
}

fn request(budget: usize) -> ContextRequest<'static> {
    ContextRequest {
        query: Some("GMV chart for East China"),
        query_vector: None,
        route: Route::Nl2sqlQuery,
        token_budget: budget,
        now: Timestamp(1_000),
        withhold_sensitive: false,
        intents: &[],
        summaries: &[],
        raw_from: None,
        tables: &[],
    }
}

#[test]
fn last_six_turns_raw_and_older_ones_summarised() {
    let ctx = assemble(
        &request(5_000),
        &turns(10),
        &MemoryIndex::default(),
        &EXTRACTOR,
    )
    .unwrap();
    assert_eq!(
        ctx.recent_turns.iter().map(|t| t.seq).collect::<Vec<_>>(),
        [4, 5, 6, 7, 8, 9]
    );
    assert_eq!(
        ctx.summaries.iter().map(|s| s.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert!(
        ctx.summaries
            .iter()
            .all(|s| s.method == "extractive" && s.text.chars().count() <= 60)
    );
    assert!(!ctx.truncated);
    assert!(ctx.text.ends_with(NO_INVENTION));
    assert!(
        ctx.entities.contains(&"GMV".to_string())
            && ctx.entities.contains(&"dw_orders".to_string())
    );
}

#[test]
fn slots_follow_route_budgets_skip_dead_records_and_serve_profiles_once_confirmed() {
    let mut records = vec![
        rec(
            "p1",
            MemoryKind::Profile,
            "prefers line charts",
            MemoryStatus::Active,
            1,
        ),
        rec(
            "p2",
            MemoryKind::Profile,
            "prefers bar charts",
            MemoryStatus::Suppressed,
            2,
        ),
        rec(
            "p3",
            MemoryKind::Profile,
            "usually asks about East China",
            MemoryStatus::Candidate,
            3,
        ),
        rec(
            "p4",
            MemoryKind::Profile,
            "likes tables",
            MemoryStatus::Deleted,
            4,
        ),
        rec(
            "c1",
            MemoryKind::Correction,
            "GMV excludes refunds",
            MemoryStatus::Active,
            5,
        ),
        rec(
            "c2",
            MemoryKind::Correction,
            "use dw_orders not orders",
            MemoryStatus::Active,
            6,
        ),
        rec(
            "e1",
            MemoryKind::Episodic,
            "asked about GMV",
            MemoryStatus::Candidate,
            7,
        ),
    ];
    let mut expired = rec(
        "p5",
        MemoryKind::Profile,
        "expired",
        MemoryStatus::Active,
        1,
    );
    expired.expires_at = Some(Timestamp(999));
    records.push(expired);
    let ctx = assemble(
        &request(5_000),
        &turns(2),
        &index(records.clone()),
        &EXTRACTOR,
    )
    .unwrap();
    let ids = |m: &[ContextMemory]| m.iter().map(|m| m.memory_id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&ctx.profile),
        ["p1"],
        "the candidate p3 is an unconfirmed preference"
    );
    assert_eq!(ids(&ctx.corrections).len(), 2);
    assert_eq!(ids(&ctx.episodic), ["e1"], "episodic candidates are served");
    assert_eq!(ctx.episodic[0].status, MemoryStatus::Candidate);
    let kpi = assemble(
        &ContextRequest {
            route: Route::KpiLookup,
            ..request(5_000)
        },
        &turns(2),
        &index(records),
        &EXTRACTOR,
    )
    .unwrap();
    assert!(kpi.episodic.is_empty(), "kpi_lookup has no episodic slot");
    assert_eq!(kpi.corrections.len(), 1);
}

#[test]
fn memories_formed_from_turns_in_the_window_are_not_repeated() {
    let mut from_window = raw(
        "e1",
        MemoryKind::Episodic,
        "asked about GMV",
        MemoryStatus::Candidate,
        1,
    );
    (from_window.session_id, from_window.turn_id) = (Some("s".into()), Some(1));
    let mut older = raw(
        "e2",
        MemoryKind::Episodic,
        "asked about GMV before",
        MemoryStatus::Candidate,
        1,
    );
    (older.session_id, older.turn_id) = (Some("s-old".into()), Some(1));
    let records = [from_window, older];
    let ctx = assemble(&request(5_000), &turns(3), &index(records), &EXTRACTOR).unwrap();
    let ids: Vec<_> = ctx.episodic.iter().map(|m| m.memory_id.as_str()).collect();
    assert_eq!(ids, ["e2"]);
}

#[test]
fn relevant_memories_rank_first() {
    let records = [
        rec(
            "p1",
            MemoryKind::Profile,
            "prefers dark dashboards",
            MemoryStatus::Active,
            1,
        ),
        rec(
            "p2",
            MemoryKind::Profile,
            "usually asks about East China GMV",
            MemoryStatus::Active,
            1,
        ),
    ];
    let ctx = assemble(&request(5_000), &[], &index(records), &EXTRACTOR).unwrap();
    assert_eq!(ctx.profile[0].memory_id, "p2");
}

#[test]
fn a_long_newest_turn_at_the_smallest_budget_is_cut_and_marked() {
    let mut turns = turns(1);
    turns[0].assistant_text = "The GMV by region was as follows. ".repeat(40);
    let ctx = assemble(
        &request(MIN_TOKEN_BUDGET),
        &turns,
        &index(Vec::new()),
        &EXTRACTOR,
    )
    .unwrap();
    assert!(ctx.tokens <= MIN_TOKEN_BUDGET, "{}", ctx.tokens);
    assert!(ctx.truncated);
    assert!(
        ctx.dropped.contains(&"part of a recent turn".to_owned()),
        "{:?}",
        ctx.dropped
    );
    let [turn] = ctx.recent_turns.as_slice() else {
        panic!("the newest turn was left out: {:?}", ctx.dropped)
    };
    assert!(turn.assistant.ends_with('…'));
    assert!(turn.assistant.starts_with("The GMV by region"));
}

#[test]
fn over_budget_drops_oldest_summaries_first_and_says_so() {
    let all = assemble(
        &request(100_000),
        &turns(20),
        &MemoryIndex::default(),
        &EXTRACTOR,
    )
    .unwrap();
    let budget = all.tokens - 30;
    let ctx = assemble(
        &request(budget),
        &turns(20),
        &MemoryIndex::default(),
        &EXTRACTOR,
    )
    .unwrap();
    assert!(
        ctx.truncated && ctx.tokens <= budget,
        "{} > {budget}",
        ctx.tokens
    );
    assert_eq!(
        ctx.recent_turns.len(),
        6,
        "raw turns stay while summaries can go"
    );
    assert!(ctx.summaries.len() < 14);
    assert_eq!(
        ctx.summaries.last().unwrap().seq,
        13,
        "the newest summaries stay"
    );
    assert!(ctx.dropped[0].contains("oldest turn summaries"));
    assert!(ctx.text.contains("Context truncated to fit"));
}

proptest! {
    #[test]
    fn a_newest_turn_longer_than_the_budget_is_cut_to_fit_or_left_out(len in 0usize..4000, cjk in any::<bool>(), budget in MIN_TOKEN_BUDGET..400) {
        let mut turns = turns(1);
        let unit = if cjk { "华东十月订单" } else { "orders of East China " };
        let long = unit.repeat(len / unit.chars().count() + 1);
        turns[0].user_text = long.clone();
        turns[0].assistant_text = long;
        let ctx = assemble(&request(budget), &turns, &index(Vec::new()), &EXTRACTOR).unwrap();
        prop_assert!(ctx.tokens <= budget, "{} > {budget}", ctx.tokens);
        prop_assert_eq!(ctx.tokens, count_tokens(&ctx.text));
        prop_assert!(ctx.text.ends_with(NO_INVENTION));
        if ctx.truncated {
            prop_assert!(ctx.text.contains("Context truncated to fit"));
        }
    }

    #[test]
    fn the_rendered_context_never_exceeds_its_budget(n in 0u64..20, budget in MIN_TOKEN_BUDGET..3000) {
        let records: Vec<_> = (0..10).map(|i| rec(&format!("m{i}"), MemoryKind::ALL[i % 4], "prefers monthly GMV by region in 华东", MemoryStatus::Active, i as i64)).collect();
        let ctx = assemble(&request(budget), &turns(n), &index(records), &EXTRACTOR).unwrap();
        prop_assert!(ctx.tokens <= budget, "{} > {budget}", ctx.tokens);
        prop_assert_eq!(ctx.truncated, !ctx.dropped.is_empty());
        prop_assert_eq!(ctx.tokens, count_tokens(&ctx.text));
        prop_assert!(ctx.text.ends_with(NO_INVENTION));
    }
}

#[test]
fn the_context_never_carries_raw_id_or_bank_card_numbers() {
    let id = "11010519491231002X";
    let card = "6222020200112233446";
    let mut turns = turns(8);
    turns[0].user_text = format!("my ID is {id}");
    turns[7].user_text = format!("pay with card {card}");
    turns[7].assistant_text = format!("card {card} noted");
    let mut withheld = rec(
        "m1",
        MemoryKind::Profile,
        "prefers GMV charts",
        MemoryStatus::Active,
        1,
    );
    withheld.redaction_level = RedactionLevel::ReferenceOnly;
    let correction = {
        let mut r = rec(
            "m2",
            MemoryKind::Correction,
            &format!("use card {card}"),
            MemoryStatus::Active,
            2,
        );
        r.payload = serde_json::json!({ "corrected_sql": format!("select * from t where card = '{card}'") }).to_string();
        r
    };
    let ctx = assemble(
        &request(5_000),
        &turns,
        &index([withheld, correction]),
        &EXTRACTOR,
    )
    .unwrap();
    assert!(
        !ctx.text.contains(id) && !ctx.text.contains(card),
        "{}",
        ctx.text
    );
    assert!(ctx.text.contains("***************3446"), "{}", ctx.text);
    assert!(
        ctx.text.contains("[memory m1 withheld: personal data]"),
        "{}",
        ctx.text
    );
    let json = serde_json::to_string(&ctx).unwrap();
    assert!(!json.contains(id) && !json.contains(card), "{json}");
}

#[test]
fn the_correction_slot_shows_at_most_three_corrections_newest_first() {
    // Five relevant corrections, written at 10..50; nl2sql_query's budget would take five.
    let corrections = (1..=5).map(|i| {
        rec(
            &format!("c{i}"),
            MemoryKind::Correction,
            &format!("GMV for East China excludes refunds, rule {i}"),
            MemoryStatus::Candidate,
            i * 10,
        )
    });
    let ctx = assemble(&request(5_000), &turns(1), &index(corrections), &EXTRACTOR).unwrap();
    let shown: Vec<&str> = ctx
        .corrections
        .iter()
        .map(|m| m.memory_id.as_str())
        .collect();
    assert_eq!(shown, ["c5", "c4", "c3"]);
    let at = |needle: &str| ctx.text.find(needle).unwrap();
    assert!(at("rule 5") < at("rule 4") && at("rule 4") < at("rule 3"));
    assert!(!ctx.text.contains("rule 2"), "{}", ctx.text);
}

#[test]
fn nl2sql_contexts_show_the_cached_metadata_of_the_tables_mentioned_only() {
    let entry = |name: &str| engram_storage::schema::SchemaEntry {
        name: name.into(),
        content: format!("{{\"table\":\"{name}\",\"columns\":[\"gmv\",\"region\"]}}"),
        stored_at: Timestamp(0),
        expires_at: Timestamp(i64::MAX),
    };
    let tables = [entry("dw_orders"), entry("dim_customer")];
    // The turns mention dw_orders; nothing mentions dim_customer.
    let ctx = assemble(
        &ContextRequest {
            tables: &tables,
            ..request(5_000)
        },
        &turns(2),
        &MemoryIndex::default(),
        &EXTRACTOR,
    )
    .unwrap();
    let names: Vec<&str> = ctx.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["dw_orders"]);
    assert!(
        ctx.text.contains("dw_orders: {\"table\":\"dw_orders\""),
        "{}",
        ctx.text
    );
    let kpi = assemble(
        &ContextRequest {
            tables: &tables,
            route: Route::KpiLookup,
            ..request(5_000)
        },
        &turns(2),
        &MemoryIndex::default(),
        &EXTRACTOR,
    )
    .unwrap();
    assert!(
        kpi.tables.is_empty(),
        "only nl2sql contexts show table metadata"
    );
}

#[test]
fn context_memories_carry_their_confidence() {
    let mut liked = rec(
        "p1",
        MemoryKind::Profile,
        "prefers line charts for GMV",
        MemoryStatus::Active,
        1,
    );
    liked.confidence = 0.9;
    let mut correction = rec(
        "c1",
        MemoryKind::Correction,
        "GMV excludes refunds",
        MemoryStatus::Active,
        2,
    );
    correction.confidence = 0.8;
    let ctx = assemble(
        &request(5_000),
        &[],
        &index([liked, correction]),
        &EXTRACTOR,
    )
    .unwrap();
    assert_eq!(
        ctx.profile.iter().map(|m| m.confidence).collect::<Vec<_>>(),
        [0.9]
    );
    assert_eq!(
        ctx.corrections
            .iter()
            .map(|m| m.confidence)
            .collect::<Vec<_>>(),
        [0.8]
    );
}

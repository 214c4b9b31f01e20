//! Tests of the memory index: what records are indexed by, neighbours, filters and removal.

use std::sync::LazyLock;

use engram_storage::types::{PiiLevel, RedactionLevel, Trigger};

use super::*;

static EXTRACTOR: LazyLock<EntityExtractor> = LazyLock::new(EntityExtractor::default);

fn record(id: &str, kind: MemoryKind, summary: &str, turn: Option<u64>) -> MemoryRecord {
    MemoryRecord {
        memory_id: id.into(),
        tenant: "t".into(),
        user_id: "u".into(),
        session_id: turn.map(|_| "s".into()),
        turn_id: turn,
        trace_id: None,
        kind,
        scope: "global".into(),
        namespace: "default".into(),
        summary_text: summary.into(),
        payload: "{}".into(),
        source_route: None,
        source_agent: None,
        confidence: 0.5,
        salience: 0.5,
        status: MemoryStatus::Active,
        pii_level: PiiLevel::None,
        redaction_level: RedactionLevel::Full,
        trigger: Trigger::Api,
        created_at: Timestamp(0),
        last_seen_at: Timestamp(0),
        last_accessed_at: None,
        expires_at: None,
        valid_from: None,
        valid_to: None,
    }
}

fn query<'a>(text: &'a str, kinds: &'a [MemoryKind]) -> MemoryQuery<'a> {
    MemoryQuery {
        text,
        vector: None,
        k: 10,
        mode: SearchMode::Hybrid,
        now: Timestamp(1),
        kinds,
        exclude_turns: &[],
        fill: false,
        active_only: false,
    }
}

fn ids(hits: &[(&MemoryRecord, f32)]) -> Vec<String> {
    hits.iter().map(|(r, _)| r.memory_id.clone()).collect()
}

#[test]
fn episodic_memories_are_found_by_their_turns_full_text_not_the_summary() {
    let mut index = MemoryIndex::new(IndexParams {
        neighbour_text: false,
        ..IndexParams::default()
    });
    let turn = "user: we adopted a golden retriever puppy named Oscar last week";
    let r = record("m1", MemoryKind::Episodic, "adopted a puppy", Some(1));
    index
        .upsert(&EXTRACTOR, r.clone(), Some(turn.into()), None)
        .unwrap();
    let hits = index.search(&EXTRACTOR, &query("Oscar", &[])).unwrap();
    assert_eq!(ids(&hits), ["m1"]);
    // A later status change keeps what the record is indexed by.
    let mut suppressed = r;
    suppressed.salience = 0.9;
    index.upsert(&EXTRACTOR, suppressed, None, None).unwrap();
    assert_eq!(
        ids(&index.search(&EXTRACTOR, &query("Oscar", &[])).unwrap()),
        ["m1"]
    );
}

#[test]
fn neighbouring_turns_lend_their_words_until_removed() {
    let mut index = MemoryIndex::default();
    let texts = [
        "what did you do on Saturday",
        "we went hiking at Mount Tam",
        "sounds lovely",
    ];
    for (i, text) in texts.iter().enumerate() {
        let r = record(&format!("m{i}"), MemoryKind::Episodic, "", Some(i as u64));
        index
            .upsert(&EXTRACTOR, r, Some((*text).into()), None)
            .unwrap();
    }
    let mut hits = ids(&index.search(&EXTRACTOR, &query("hiking", &[])).unwrap());
    hits.sort();
    assert_eq!(hits, ["m0", "m1", "m2"], "both neighbours carry the word");
    assert!(index.remove("m1"));
    assert!(
        index
            .search(&EXTRACTOR, &query("hiking", &[]))
            .unwrap()
            .is_empty(),
        "nothing of a removed turn stays in its neighbours"
    );
}

#[test]
fn a_changed_text_is_read_again_and_its_neighbour_lends_the_new_words() {
    // What the index reads from a text is kept and reused while the text stays the same;
    // a new text must be read again, for the record and for the neighbour it lends words to.
    let mut index = MemoryIndex::default();
    for (i, text) in ["we went hiking at Mount Tam", "sounds lovely"]
        .iter()
        .enumerate()
    {
        let r = record(&format!("m{i}"), MemoryKind::Episodic, "", Some(i as u64));
        index
            .upsert(&EXTRACTOR, r, Some((*text).into()), None)
            .unwrap();
    }
    let found = |index: &MemoryIndex, word: &str| {
        let mut hits = ids(&index.search(&EXTRACTOR, &query(word, &[])).unwrap());
        hits.sort();
        hits
    };
    assert_eq!(found(&index, "hiking"), ["m0", "m1"]);
    let r = record("m0", MemoryKind::Episodic, "", Some(0));
    index
        .upsert(
            &EXTRACTOR,
            r.clone(),
            Some("we went kayaking instead".into()),
            None,
        )
        .unwrap();
    assert!(found(&index, "hiking").is_empty(), "the old words are gone");
    assert_eq!(found(&index, "kayaking"), ["m0", "m1"]);
    // The same text again (a status change, a vector arriving) keeps what it is found by.
    index
        .upsert(&EXTRACTOR, r, None, Some(vec![1.0, 0.0, 0.0]))
        .unwrap();
    assert_eq!(found(&index, "kayaking"), ["m0", "m1"]);
}

#[test]
fn searches_filter_by_kind_liveness_and_the_turns_in_the_window() {
    let mut index = MemoryIndex::default();
    let mut expired = record("old", MemoryKind::Profile, "prefers line charts", None);
    expired.expires_at = Some(Timestamp(1));
    for r in [
        record("p", MemoryKind::Profile, "prefers line charts", None),
        record("e", MemoryKind::Episodic, "line charts of GMV", Some(7)),
        expired,
    ] {
        index.upsert(&EXTRACTOR, r, None, None).unwrap();
    }
    let profile = index
        .search(&EXTRACTOR, &query("line charts", &[MemoryKind::Profile]))
        .unwrap();
    assert_eq!(ids(&profile), ["p"], "expired records are not live");
    let window = [("s", 7)];
    let q = MemoryQuery {
        exclude_turns: &window,
        ..query("line charts", &[MemoryKind::Episodic])
    };
    assert!(index.search(&EXTRACTOR, &q).unwrap().is_empty());
}

#[test]
fn active_only_leaves_candidates_out_and_by_default_both_are_found() {
    let mut index = MemoryIndex::default();
    let mut candidate = record("c", MemoryKind::Episodic, "line charts by week", Some(1));
    candidate.status = MemoryStatus::Candidate;
    let active = record("a", MemoryKind::Episodic, "line charts by month", Some(2));
    for r in [candidate, active] {
        index.upsert(&EXTRACTOR, r, None, None).unwrap();
    }
    let both = query("line charts", &[]);
    let mut found = ids(&index.search(&EXTRACTOR, &both).unwrap());
    found.sort();
    assert_eq!(found, ["a", "c"]);
    let active_only = MemoryQuery {
        active_only: true,
        ..query("line charts", &[])
    };
    assert_eq!(ids(&index.search(&EXTRACTOR, &active_only).unwrap()), ["a"]);
}

#[test]
fn fill_ranks_unmatched_memories_after_matched_ones() {
    let mut index = MemoryIndex::default();
    for (id, text) in [("a", "prefers bar charts"), ("b", "reports in万元")] {
        index
            .upsert(
                &EXTRACTOR,
                record(id, MemoryKind::Profile, text, None),
                None,
                None,
            )
            .unwrap();
    }
    let q = MemoryQuery {
        fill: true,
        ..query("bar charts", &[])
    };
    assert_eq!(ids(&index.search(&EXTRACTOR, &q).unwrap()), ["a", "b"]);
    let empty = MemoryQuery {
        fill: true,
        ..query("", &[])
    };
    assert_eq!(index.search(&EXTRACTOR, &empty).unwrap().len(), 2);
}

#[test]
fn vectors_rank_dense_search_and_deleted_records_lose_theirs() {
    let mut index = MemoryIndex::default();
    let x = vec![1.0, 0.0, 0.0];
    let y = vec![0.0, 1.0, 0.0];
    index
        .upsert(
            &EXTRACTOR,
            record("x", MemoryKind::Profile, "one", None),
            None,
            Some(x.clone()),
        )
        .unwrap();
    index
        .upsert(
            &EXTRACTOR,
            record("y", MemoryKind::Profile, "two", None),
            None,
            Some(y),
        )
        .unwrap();
    let dense = MemoryQuery {
        vector: Some(&x),
        mode: SearchMode::Dense,
        ..query("", &[])
    };
    assert_eq!(ids(&index.search(&EXTRACTOR, &dense).unwrap())[0], "x");
    assert!(
        index
            .upsert(
                &EXTRACTOR,
                record("z", MemoryKind::Profile, "three", None),
                None,
                Some(vec![1.0, 0.0]),
            )
            .is_err(),
        "a vector of another dimension is refused"
    );
    assert!(index.get("z").is_none(), "and changes nothing");
    let mut deleted = record("x", MemoryKind::Profile, "one", None);
    deleted.status = MemoryStatus::Deleted;
    index.upsert(&EXTRACTOR, deleted, None, None).unwrap();
    assert!(!index.has_vector("x"));
}

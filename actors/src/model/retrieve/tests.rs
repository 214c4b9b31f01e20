//! Unit tests of hybrid retrieval: BM25 ranking, dense ranking, fusion, Chinese segmentation,
//! filters, priors, replacement and removal.

use std::sync::LazyLock;

use engram_storage::types::Timestamp;

use super::*;

static EXTRACTOR: LazyLock<EntityExtractor> = LazyLock::new(EntityExtractor::default);

/// A unit vector along `axis` tilted by `tilt` towards axis 3 (4 dimensions).
fn unit(axis: usize, tilt: f32) -> Vec<f32> {
    let mut v = [0.0f32; 4];
    v[axis] = 1.0;
    v[3] += tilt;
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

fn ids(hits: &[(&'static str, f32)]) -> Vec<&'static str> {
    hits.iter().map(|(id, _)| *id).collect()
}

fn retriever(docs: &[(&'static str, &str)]) -> Retriever<&'static str> {
    let mut r = Retriever::new(RetrieverParams::default());
    for &(id, text) in docs {
        r.index(&EXTRACTOR, id, text, None, DocFeatures::default())
            .unwrap();
    }
    r
}

#[test]
fn bm25_ranks_the_matching_document_first() {
    let r = retriever(&[
        ("a", "I went to the beach with my kids last weekend"),
        ("b", "My favourite painting shows a sunset over the lake"),
        ("c", "We adopted a puppy, a golden retriever named Oscar"),
        ("d", "The weather was nice and we went for a walk"),
    ]);
    let hits = r
        .search(
            &EXTRACTOR,
            &Query::new("what is the name of the puppy", 2, SearchMode::Bm25),
        )
        .unwrap();
    assert_eq!(hits[0].0, "c", "{hits:?}");
    let hits = r
        .search(
            &EXTRACTOR,
            &Query::new("paintings of sunsets", 4, SearchMode::Bm25),
        )
        .unwrap();
    assert_eq!(
        ids(&hits),
        ["b"],
        "stemming matches plurals; non-matching docs are absent"
    );
}

#[test]
fn dense_ranks_by_cosine_and_skips_documents_without_vectors() {
    let mut r = Retriever::new(RetrieverParams::default());
    r.index(
        &EXTRACTOR,
        "x",
        "one",
        Some(&unit(0, 0.0)),
        DocFeatures::default(),
    )
    .unwrap();
    r.index(
        &EXTRACTOR,
        "y",
        "two",
        Some(&unit(1, 0.0)),
        DocFeatures::default(),
    )
    .unwrap();
    r.index(&EXTRACTOR, "z", "three", None, DocFeatures::default())
        .unwrap();
    let q = unit(1, 0.1);
    let hits = r
        .search(&EXTRACTOR, &Query::new("", 5, SearchMode::Dense).vector(&q))
        .unwrap();
    assert_eq!(ids(&hits), ["y", "x"]);
    assert!(hits[0].1 > 0.99 && hits[1].1.abs() < 0.01, "{hits:?}");
    assert!(
        r.search(&EXTRACTOR, &Query::new("one", 5, SearchMode::Dense))
            .unwrap()
            .is_empty()
    );
}

/// One relevant document ranks first by its words and third by its vector, another the other
/// way round; each single signal puts a distractor second, so it finds one of the two in its
/// top 2, and fusion finds both.
#[test]
fn fusion_beats_either_signal_alone() {
    let mut r = Retriever::new(RetrieverParams::default());
    let q = unit(0, 0.0);
    let docs = [
        // relevant: BM25 first, dense third
        (
            "lexical",
            "my sister's wedding is in Lisbon in June",
            unit(0, 0.8),
        ),
        // relevant: dense first, BM25 third (shares only "is")
        (
            "semantic",
            "she is getting married this summer near Porto",
            unit(0, 0.2),
        ),
        // distractor: BM25 second, dense last
        ("words", "Lisbon in June is hot", unit(1, 0.0)),
        // distractor: dense second, no shared word
        ("near", "we talked about our plans", unit(0, 0.5)),
        // fillers
        ("filler1", "lunch was fine", unit(0, 1.0)),
        ("filler2", "a quiet day at home", unit(0, 1.5)),
    ];
    for (id, text, v) in &docs {
        r.index(&EXTRACTOR, *id, *text, Some(v), DocFeatures::default())
            .unwrap();
    }
    let text = "when is the wedding in Lisbon in June";
    let relevant = ["lexical", "semantic"];
    let recall = |mode| {
        let hits = r
            .search(&EXTRACTOR, &Query::new(text, 2, mode).vector(&q))
            .unwrap();
        hits.iter().filter(|(id, _)| relevant.contains(id)).count()
    };
    assert_eq!(recall(SearchMode::Bm25), 1);
    assert_eq!(recall(SearchMode::Dense), 1);
    assert_eq!(recall(SearchMode::Hybrid), 2);

    let mut weighted = Retriever::new(RetrieverParams {
        fusion: Fusion::Weighted,
        ..RetrieverParams::default()
    });
    for (id, text, v) in &docs {
        weighted
            .index(&EXTRACTOR, *id, *text, Some(v), DocFeatures::default())
            .unwrap();
    }
    let hits = weighted
        .search(
            &EXTRACTOR,
            &Query::new(text, 2, SearchMode::Hybrid).vector(&q),
        )
        .unwrap();
    assert_eq!(
        hits.iter().filter(|(id, _)| relevant.contains(id)).count(),
        2,
        "{hits:?}"
    );
}

#[test]
fn chinese_queries_match_chinese_text_through_jieba_words() {
    let r = retriever(&[
        ("boss", "我的上司今年44岁。"),
        ("job", "我的上司是银行行长。"),
        ("hobby", "我妹妹的兴趣爱好是摄影。"),
        ("city", "我住在广东深圳。"),
    ]);
    let hits = r
        .search(
            &EXTRACTOR,
            &Query::new("妹妹喜欢什么兴趣爱好？", 1, SearchMode::Bm25),
        )
        .unwrap();
    assert_eq!(ids(&hits), ["hobby"]);
    let hits = r
        .search(
            &EXTRACTOR,
            &Query::new("上司是做什么工作的，银行吗", 1, SearchMode::Bm25),
        )
        .unwrap();
    assert_eq!(ids(&hits), ["job"]);
}

#[test]
fn filters_apply_before_ranking() {
    let mut r = Retriever::new(RetrieverParams::default());
    for (i, id) in ["old", "new", "other"].into_iter().enumerate() {
        let features = DocFeatures {
            seen_at: Timestamp(i as i64 * 1000),
            salience: 0.5,
            ..DocFeatures::default()
        };
        r.index(
            &EXTRACTOR,
            id,
            "GMV of East China",
            Some(&unit(0, 0.0)),
            features,
        )
        .unwrap();
    }
    let keep = |id: &&str, f: &DocFeatures| *id != "other" && f.seen_at.0 >= 1000;
    let q = unit(0, 0.0);
    for mode in [SearchMode::Bm25, SearchMode::Dense, SearchMode::Hybrid] {
        let hits = r
            .search(
                &EXTRACTOR,
                &Query::new("GMV", 3, mode).vector(&q).filter(&keep),
            )
            .unwrap();
        assert_eq!(ids(&hits), ["new"], "{mode:?}");
    }
}

#[test]
fn recency_and_salience_break_ties_in_hybrid_search() {
    let mut r = Retriever::new(RetrieverParams::default());
    let day = DAY_MS;
    r.index(
        &EXTRACTOR,
        "stale",
        "prefers line charts",
        None,
        DocFeatures {
            seen_at: Timestamp(0),
            salience: 0.5,
            ..DocFeatures::default()
        },
    )
    .unwrap();
    r.index(
        &EXTRACTOR,
        "fresh",
        "prefers line charts",
        None,
        DocFeatures {
            seen_at: Timestamp(60 * day),
            salience: 0.5,
            ..DocFeatures::default()
        },
    )
    .unwrap();
    r.index(
        &EXTRACTOR,
        "salient",
        "prefers line charts",
        None,
        DocFeatures {
            seen_at: Timestamp(0),
            salience: 1.0,
            ..DocFeatures::default()
        },
    )
    .unwrap();
    let hits = r
        .search(
            &EXTRACTOR,
            &Query::new("line charts", 3, SearchMode::Hybrid).now(Timestamp(60 * day)),
        )
        .unwrap();
    assert_eq!(hits[2].0, "stale", "{hits:?}");
}

#[test]
fn reindexing_replaces_and_removal_forgets() {
    let mut r = retriever(&[("a", "apples and pears"), ("b", "bananas")]);
    r.index(&EXTRACTOR, "a", "cherries", None, DocFeatures::default())
        .unwrap();
    assert_eq!(r.len(), 2);
    assert!(
        r.search(&EXTRACTOR, &Query::new("apples", 5, SearchMode::Bm25))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&r
            .search(&EXTRACTOR, &Query::new("cherries", 5, SearchMode::Bm25))
            .unwrap()),
        ["a"]
    );
    assert!(r.remove(&"b"));
    assert!(!r.remove(&"b"));
    assert!(
        r.search(&EXTRACTOR, &Query::new("bananas", 5, SearchMode::Hybrid))
            .unwrap()
            .is_empty()
    );
    assert_eq!(r.len(), 1);
}

#[test]
fn stemming_conflates_common_english_forms() {
    let s = |w: &str| {
        let mut w = w.to_owned();
        stem(&mut w);
        w
    };
    assert_eq!(s("paintings"), s("painting"));
    assert_eq!(s("painted"), s("paint"));
    assert_eq!(s("loved"), s("love"));
    assert_eq!(s("loving"), s("love"));
    assert_eq!(s("running"), s("run"));
    assert_eq!(s("stories"), s("story"));
    assert_eq!(s("华东地区"), "华东地区");
}

#[test]
fn the_salience_prior_ranks_by_the_salience_left_at_the_querys_time() {
    let mut r = Retriever::new(RetrieverParams::default());
    let day = DAY_MS;
    // Same words, same time seen: only salience tells them apart.
    for (id, salience, decay_per_day) in [("fading", 0.6, 0.02), ("steady", 0.5, 0.0)] {
        let features = DocFeatures {
            seen_at: Timestamp(0),
            salience,
            decay_per_day,
            written_at: None,
        };
        r.index(&EXTRACTOR, id, "prefers line charts", None, features)
            .unwrap();
    }
    let first_at = |now: i64| {
        let query = Query::new("line charts", 2, SearchMode::Hybrid).now(Timestamp(now));
        r.search(&EXTRACTOR, &query).unwrap()[0].0.to_owned()
    };
    assert_eq!(first_at(0), "fading", "0.6 against 0.5 when both are fresh");
    assert_eq!(
        first_at(30 * day),
        "steady",
        "0.6 - 30 x 0.02 = 0 against 0.5"
    );
}

/// Documents written on the given days (UTC milliseconds) with the same words, and a query
/// naming a time: with a date weight, those that speak of it come first.
#[test]
fn a_query_naming_a_time_ranks_documents_written_or_speaking_of_it_first() {
    // 8 May 2023 and 20 July 2023, noon UTC.
    let may_8 = 19_485 * DAY_MS + DAY_MS / 2;
    let july_20 = 19_558 * DAY_MS + DAY_MS / 2;
    let docs = [
        ("may", "We ate pasta here", may_8),
        ("may-yesterday", "Yesterday we ate pasta at home", may_8),
        ("july", "We ate pasta by the lake", july_20),
    ];
    let build = |date_weight: f32| {
        let mut r = Retriever::new(RetrieverParams {
            date_weight,
            salience_weight: 0.0,
            recency_weight: 0.0,
            ..RetrieverParams::default()
        });
        for (id, text, at) in docs {
            let features = DocFeatures {
                seen_at: Timestamp(at),
                written_at: Some(Timestamp(at)),
                ..DocFeatures::default()
            };
            r.index(&EXTRACTOR, id, text, None, features).unwrap();
        }
        r
    };
    let ask = |r: &Retriever<&'static str>, text: &str| {
        let hits = r
            .search(
                &EXTRACTOR,
                &Query::new(text, 3, SearchMode::Hybrid).now(Timestamp(july_20)),
            )
            .unwrap();
        ids(&hits)
    };
    let dated = build(1.0);
    let plain = build(0.0);
    // "Yesterday" in a turn of 8 May is 7 May.
    for (text, want) in [
        ("where did we eat pasta in July 2023", "july"),
        ("where did we eat pasta on 7 May 2023", "may-yesterday"),
    ] {
        assert_eq!(ask(&dated, text)[0], want, "{text}");
        // Without a date weight the shortest document wins on words alone.
        assert_eq!(ask(&plain, text)[0], "may", "{text}");
    }
    // A year says too little to rank by.
    assert_eq!(
        ask(&dated, "where did we eat pasta in 2023"),
        ask(&plain, "where did we eat pasta in 2023")
    );
}

/// Turns found by the question's words, one of them by the person it names: with an entity
/// weight the turns that name the person come first; a turn found by its neighbour's words
/// names only what its own text says, and is not lifted.
#[test]
fn a_query_naming_someone_ranks_the_turns_that_name_them_first() {
    let docs = [
        (
            "caroline",
            "[May] Caroline: camping at the lake with the kids",
            None,
        ),
        ("melanie", "[May] Melanie: camping was great", None),
        (
            "neighbour",
            "[May] Caroline: we love the lake",
            Some("[May] Melanie: fun"),
        ),
    ];
    let build = |entity_weight: f32| {
        let mut r = Retriever::new(RetrieverParams {
            entity_weight,
            ..RetrieverParams::default()
        });
        for (id, own, next) in docs {
            let words = next.map_or(own.to_owned(), |next| format!("{own}\n{next}"));
            let text = DocText { words: &words, own };
            r.index(&EXTRACTOR, id, text, None, DocFeatures::default())
                .unwrap();
        }
        r
    };
    let ask = |r: &Retriever<&'static str>| {
        let text = "when did Melanie go camping at the lake with the kids";
        let hits = r.search(&EXTRACTOR, &Query::new(text, 3, SearchMode::Hybrid));
        ids(&hits.unwrap())
    };
    // Words alone: the most words first, the neighbour's "Melanie" next.
    assert_eq!(ask(&build(0.0)), ["caroline", "neighbour", "melanie"]);
    assert_eq!(ask(&build(1.0)), ["melanie", "caroline", "neighbour"]);
}

#[test]
fn texts_read_apart_give_the_terms_and_days_of_the_texts_read_joined() {
    // A turn is indexed with its neighbours' words from analyses read once a text; they must
    // give what reading the neighbours' texts joined to the turn's gave.
    let r: Retriever<&'static str> = Retriever::new(RetrieverParams::default());
    let written = Some(Timestamp(1_683_548_160_000)); // 2023-05-08
    let pairs = [
        (
            "Yesterday we booked the lake cabin for June 3",
            "Great, see you on 2023-06-03!",
        ),
        ("上周三我们去了杭州，3月5日回来", "明天再约时间吧"),
        (
            "Show GMV of 华东 in March from dw_orders, by week",
            "GMV of 华东 in March: 4 weekly rows.",
        ),
        ("running runs ran", "ran, running; RUNS"),
    ];
    for (a, b) in pairs {
        let joined = r.analyse(&EXTRACTOR, &format!("{a}\n{b}"), written);
        let (a, b) = (
            r.analyse(&EXTRACTOR, a, written),
            r.analyse(&EXTRACTOR, b, written),
        );
        let apart: Vec<&str> = a.terms().chain(b.terms()).collect();
        assert_eq!(joined.terms().collect::<Vec<_>>(), apart);
        let mut days = a.days.to_vec();
        days.extend(b.days.iter().filter(|d| !a.days.contains(d)));
        assert_eq!(*joined.days, *days);
        assert!(!joined.terms.is_empty());
    }
}

#[test]
fn a_document_indexed_from_analyses_ranks_as_one_indexed_from_its_text() {
    let written = Timestamp(1_683_548_160_000);
    let features = DocFeatures {
        written_at: Some(written),
        ..DocFeatures::default()
    };
    let docs = [
        ("a", "We went to the lake yesterday", "and swam at noon"),
        ("b", "I booked the dentist", "see you then, on June 3"),
        ("c", "GMV of 华东 in March", "4 weekly rows from dw_orders"),
    ];
    let mut from_text = Retriever::new(RetrieverParams::default());
    let mut from_analyses = Retriever::new(RetrieverParams::default());
    for (id, own, next) in docs {
        let words = format!("{own}\n{next}");
        let text = DocText { words: &words, own };
        from_text
            .index(&EXTRACTOR, id, text, None, features)
            .unwrap();
        let own = from_analyses.analyse(&EXTRACTOR, own, Some(written));
        let next = from_analyses.analyse(&EXTRACTOR, next, Some(written));
        from_analyses
            .index_analysed(id, &own, &[&next], None, features)
            .unwrap();
    }
    // Words and days of the neighbour's text as well as of the document's own.
    for question in [
        "who swam at noon",
        "the lake on 2023-05-07",
        "the dentist on 2023-06-03",
        "see you then",
        "weekly rows from dw_orders",
        "华东 GMV",
    ] {
        let query = Query::new(question, 3, SearchMode::Hybrid).now(written);
        let hits = |r: &Retriever<&'static str>| r.search(&EXTRACTOR, &query).unwrap();
        assert!(!hits(&from_text).is_empty(), "{question}");
        assert_eq!(hits(&from_text), hits(&from_analyses), "{question}");
    }
}

//! Unit tests of the vector index: exact and HNSW agreement, upsert and remove semantics,
//! tombstone-triggered rebuilds, input validation, and a property test of exact top-k.

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::exact::{dot, normalise};
use super::*;

const DIM: usize = 16;

fn config(exact_threshold: usize) -> VectorConfig {
    VectorConfig {
        dimension: DIM,
        exact_threshold,
        ..VectorConfig::default()
    }
}

/// Seeded vectors with components uniform in [-1, 1).
fn random_vectors(seed: u64, n: usize) -> Vec<Vec<f32>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect()
}

fn rows(vectors: &[Vec<f32>]) -> Vec<(String, Vec<f32>)> {
    vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("m{i:04}"), v.clone()))
        .collect()
}

fn ids(hits: &[(String, f32)]) -> Vec<&str> {
    hits.iter().map(|(id, _)| id.as_str()).collect()
}

fn all(_: &str) -> bool {
    true
}

#[test]
fn index_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<VectorIndex>();
}

#[test]
fn exact_and_hnsw_agree_on_small_sets() {
    let vectors = random_vectors(1, 300);
    let exact = VectorIndex::new(config(usize::MAX)).unwrap();
    let mut hnsw_config = config(1);
    // A search width above the set size makes the graph search visit every reachable point.
    hnsw_config.hnsw.ef_search = 400;
    let hnsw = VectorIndex::new(hnsw_config).unwrap();
    exact.rebuild(rows(&vectors)).unwrap();
    hnsw.rebuild(rows(&vectors)).unwrap();
    assert!(!exact.stats().hnsw);
    assert!(hnsw.stats().hnsw);
    for query in random_vectors(2, 20) {
        let a = exact.search(&query, 10, all).unwrap();
        let b = hnsw.search(&query, 10, all).unwrap();
        assert_eq!(a, b);
    }
    // With the default search width, recall stays high.
    hnsw.set_ef_search(16);
    let mut found = 0;
    for query in random_vectors(3, 20) {
        let truth = exact.search(&query, 10, all).unwrap();
        let got = hnsw.search(&query, 10, all).unwrap();
        found += ids(&got)
            .iter()
            .filter(|id| ids(&truth).contains(id))
            .count();
    }
    assert!(found >= 190, "recall@10 {found}/200");
}

#[test]
fn hnsw_results_respect_filter_and_tombstones() {
    let vectors = random_vectors(4, 400);
    let index = VectorIndex::new(config(100)).unwrap();
    index.rebuild(rows(&vectors)).unwrap();
    assert!(index.stats().hnsw);
    // Remove a few of the best matches of the first vector, then ask for it again.
    let query = vectors[0].clone();
    for (id, _) in index.search(&query, 5, all).unwrap() {
        assert!(index.remove(&id));
    }
    let even = |id: &str| id.ends_with(['0', '2', '4', '6', '8']);
    let got = index.search(&query, 10, even).unwrap();
    let truth = index.search_exact(&query, 10, even).unwrap();
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|(id, _)| even(id) && index.contains(id)));
    let hits = ids(&got)
        .iter()
        .filter(|id| ids(&truth).contains(id))
        .count();
    assert!(hits >= 9, "filtered recall {hits}/10");
    // Asking for more than there is returns every live vector once.
    let everything = index.search(&query, usize::MAX, all).unwrap();
    assert_eq!(everything.len(), index.len());
    // A filter matching one id far from the query still finds it (exact fallback).
    let lonely = "m0399";
    let got = index.search(&query, 3, |id| id == lonely).unwrap();
    assert_eq!(ids(&got), vec![lonely]);
}

#[test]
fn upsert_replaces_and_remove_deletes() {
    for threshold in [usize::MAX, 1] {
        let index = VectorIndex::new(config(threshold)).unwrap();
        let mut a = vec![0.0; DIM];
        a[0] = 1.0;
        let mut b = vec![0.0; DIM];
        b[1] = 2.0;
        index.upsert("a", &a).unwrap();
        index.upsert("b", &b).unwrap();
        assert_eq!(index.len(), 2);
        // Move "a" onto "b"'s direction: a query along axis 0 no longer finds it first.
        index.upsert("a", &b).unwrap();
        assert_eq!(index.len(), 2);
        let hits = index.search(&a, 2, all).unwrap();
        assert_eq!(ids(&hits), vec!["a", "b"]);
        assert!(hits.iter().all(|(_, score)| score.abs() < 1e-6));
        let hits = index.search(&b, 1, all).unwrap();
        assert!((hits[0].1 - 1.0).abs() < 1e-6, "normalised: {hits:?}");
        assert!(index.remove("a"));
        assert!(!index.remove("a"));
        assert!(!index.contains("a"));
        assert_eq!(ids(&index.search(&b, 5, all).unwrap()), vec!["b"]);
        assert!(index.remove("b"));
        assert!(index.is_empty());
        assert!(index.search(&b, 5, all).unwrap().is_empty());
    }
}

#[test]
fn tombstones_trigger_a_rebuild() {
    let vectors = random_vectors(5, 100);
    let mut cfg = config(50);
    cfg.rebuild_tombstone_fraction = 0.2;
    let index = VectorIndex::new(cfg).unwrap();
    index.rebuild(rows(&vectors)).unwrap();
    let before = index.stats();
    assert_eq!(before.live, 100);
    assert!(before.hnsw);
    // 20 of 100 entries tombstoned is not past 20%; the 21st is.
    for i in 0..20 {
        assert!(index.remove(&format!("m{i:04}")));
    }
    let stats = index.stats();
    assert_eq!((stats.tombstones, stats.rebuilds), (20, before.rebuilds));
    assert!(index.remove("m0020"));
    let stats = index.stats();
    assert_eq!(stats.tombstones, 0);
    assert_eq!(stats.rebuilds, before.rebuilds + 1);
    assert_eq!(stats.live, 79);
    assert!(stats.hnsw);
    // Upserts tombstone too: replacing every vector compacts as it goes.
    for (id, v) in rows(&vectors).into_iter().skip(21) {
        index.upsert(&id, &v).unwrap();
    }
    assert_eq!(index.len(), 79);
    assert!(index.stats().tombstones * 5 <= 79 * 2);
    // Dropping below the threshold returns to exact search at the next rebuild.
    for i in 21..70 {
        index.remove(&format!("m{i:04}"));
    }
    assert!(!index.stats().hnsw);
    assert_eq!(index.len(), 30);
    let query = &vectors[80];
    let hits = index.search(query, 1, all).unwrap();
    assert_eq!(ids(&hits), vec!["m0080"]);
}

#[test]
fn large_sets_defer_rebuilds_to_compact() {
    let vectors = random_vectors(8, 100);
    let mut cfg = config(50);
    cfg.max_inline_rebuild = 60;
    let index = VectorIndex::new(cfg).unwrap();
    index.rebuild(rows(&vectors)).unwrap();
    let query = &vectors[99];
    for i in 0..30 {
        assert!(index.remove(&format!("m{i:04}")));
    }
    // 30% tombstones on 70 live vectors: too large to rebuild inline.
    let stats = index.stats();
    assert_eq!((stats.live, stats.tombstones), (70, 30));
    assert!(index.needs_rebuild());
    let before = index.search(query, 5, all).unwrap();
    assert!(index.compact());
    let stats = index.stats();
    assert_eq!((stats.live, stats.tombstones, stats.hnsw), (70, 0, true));
    assert!(!index.needs_rebuild());
    assert_eq!(index.search_exact(query, 5, all).unwrap(), before);
    assert_eq!(index.search(query, 1, all).unwrap()[0].0, "m0099");
    // Under the inline limit, the write that crosses the fraction rebuilds by itself.
    for i in 30..45 {
        index.remove(&format!("m{i:04}"));
    }
    let stats = index.stats();
    assert_eq!((stats.live, stats.tombstones, stats.hnsw), (55, 0, true));
    assert!(!index.needs_rebuild());
}

#[test]
fn growing_past_the_threshold_switches_to_hnsw() {
    let vectors = random_vectors(6, 60);
    let index = VectorIndex::new(config(50)).unwrap();
    for (id, v) in rows(&vectors) {
        index.upsert(&id, &v).unwrap();
        assert_eq!(index.stats().hnsw, index.len() >= 50);
    }
    for (i, v) in vectors.iter().enumerate() {
        let hits = index.search(v, 1, all).unwrap();
        assert_eq!(ids(&hits), vec![format!("m{i:04}").as_str()]);
    }
}

#[test]
fn bad_input_is_an_error_and_changes_nothing() {
    let index = VectorIndex::new(config(usize::MAX)).unwrap();
    index.upsert("ok", &[1.0; DIM]).unwrap();
    assert_eq!(
        index.upsert("x", &[1.0; 3]),
        Err(VectorError::DimensionMismatch {
            expected: DIM,
            got: 3
        })
    );
    let mut nan = vec![1.0; DIM];
    nan[7] = f32::NAN;
    assert_eq!(
        index.upsert("x", &nan),
        Err(VectorError::NonFinite { index: 7 })
    );
    nan[7] = f32::INFINITY;
    assert_eq!(
        index.upsert("ok", &nan),
        Err(VectorError::NonFinite { index: 7 })
    );
    assert_eq!(index.upsert("x", &[0.0; DIM]), Err(VectorError::ZeroVector));
    assert!(matches!(
        index.search(&[0.0; DIM], 1, all),
        Err(VectorError::ZeroVector)
    ));
    assert!(index.search(&[1.0; 2], 1, all).is_err());
    // k far beyond the set size is fine, and Debug shows no vectors.
    assert_eq!(index.search(&[1.0; DIM], usize::MAX, all).unwrap().len(), 1);
    assert!(!format!("{index:?}").contains("1.0"));
    // A failed rebuild leaves the old contents.
    let bad = vec![
        ("y".to_owned(), vec![1.0; DIM]),
        ("z".to_owned(), vec![2.0]),
    ];
    assert!(index.rebuild(bad).is_err());
    assert_eq!(index.len(), 1);
    assert!(index.contains("ok"));
    // Huge but finite components normalise without overflow.
    index.upsert("big", &[f32::MAX; DIM]).unwrap();
    let hits = index.search(&[1.0; DIM], 2, all).unwrap();
    assert!(hits.iter().all(|(_, s)| (s - 1.0).abs() < 1e-5), "{hits:?}");
    // Model mismatches are refused.
    let embedding = Embedding {
        model: "other".into(),
        vector: vec![1.0; DIM],
    };
    assert!(matches!(
        index.rebuild_embeddings("e5", [("q".to_owned(), embedding)]),
        Err(VectorError::ModelMismatch { .. })
    ));
    assert!(VectorIndex::new(VectorConfig::with_dimension(0)).is_err());
    let mut cfg = config(1);
    cfg.rebuild_tombstone_fraction = 0.0;
    assert!(VectorIndex::new(cfg).is_err());
}

#[test]
fn self_match_does_not_panic_in_the_graph() {
    // Unit vectors whose self dot product rounds above 1 used to trip hnsw_rs's DistDot.
    let vectors = random_vectors(7, 200);
    // The hazard is real: some of these round to a self dot product above 1 when summed the
    // way DistDot sums, which would make its `1 - dot >= 0` assertion panic.
    let above_one = vectors
        .iter()
        .map(|v| normalise(v, DIM).unwrap())
        .filter(|u| u.iter().map(|x| x * x).fold(0.0f32, |a, b| a + b) > 1.0)
        .count();
    assert!(above_one > 0);
    let index = VectorIndex::new(config(1)).unwrap();
    index.rebuild(rows(&vectors)).unwrap();
    for v in &vectors {
        let unit = normalise(v, DIM).unwrap();
        assert!(dot(&unit, &unit) > 0.9999);
        let hits = index.search(v, 1, all).unwrap();
        assert!(hits[0].1 > 0.9999);
    }
}

proptest! {
    #[test]
    fn exact_search_returns_the_true_top_k(
        vectors in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, DIM), 1..60),
        query in prop::collection::vec(-1.0f32..1.0, DIM),
        k in 0usize..20,
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        prop_assume!(query.iter().any(|x| *x != 0.0));
        let vectors: Vec<Vec<f32>> =
            vectors.into_iter().filter(|v| v.iter().any(|x| *x != 0.0)).collect();
        let index = VectorIndex::new(config(usize::MAX)).unwrap();
        index.rebuild(rows(&vectors)).unwrap();
        let mut live: Vec<(String, Vec<f32>)> = rows(&vectors);
        for r in removed {
            if live.is_empty() {
                break;
            }
            let (id, _) = live.remove(r.index(live.len()));
            prop_assert!(index.remove(&id));
        }
        let unit_query = normalise(&query, DIM).unwrap();
        let mut truth: Vec<(String, f32)> = live
            .iter()
            .map(|(id, v)| (id.clone(), dot(&unit_query, &normalise(v, DIM).unwrap())))
            .collect();
        truth.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        truth.truncate(k);
        prop_assert_eq!(index.search(&query, k, all).unwrap(), truth);
    }
}

/// Seeded points around `clusters` random centres, in random cluster order, with small noise.
fn clustered_vectors(seed: u64, clusters: usize, n: usize, noise: f32) -> Vec<Vec<f32>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect();
    (0..n)
        .map(|_| {
            let centre = &centres[rng.random_range(0..clusters)];
            centre
                .iter()
                .map(|c| c + noise * rng.random_range(-1.0..1.0))
                .collect()
        })
        .collect()
}

/// Recall@10 of `index` over `queries`, out of `10 * queries.len()`.
fn found(index: &VectorIndex, queries: &[Vec<f32>]) -> usize {
    queries
        .iter()
        .map(|q| {
            let truth = index.search_exact(q, 10, all).unwrap();
            let got = index.search(q, 10, all).unwrap();
            ids(&got)
                .iter()
                .filter(|id| ids(&truth).contains(id))
                .count()
        })
        .sum()
}

#[test]
fn graph_search_enters_the_query_cluster() {
    // Tight clusters and few links: `hnsw_rs` keeps only the nearest links when a node's list
    // overflows, so clusters end up poorly linked, and its own search (one hop per upper layer)
    // often starts layer 0 in the wrong cluster. Measured: 945/1000 with it, 985 with ours.
    let vectors = clustered_vectors(9, 80, 2100, 0.05);
    let (vectors, queries) = vectors.split_at(2000);
    let mut config = config(1);
    config.hnsw.max_connections = 6;
    config.hnsw.ef_construction = 32;
    config.hnsw.ef_search = 10;
    let index = VectorIndex::new(config).unwrap();
    index.rebuild(rows(vectors)).unwrap();
    let ours = found(&index, queries);
    index.set_graph_search(GraphSearch::Library);
    let library = found(&index, queries);
    assert!(
        ours >= 970,
        "recall@10 {ours}/1000 (hnsw_rs's search: {library})"
    );
    assert!(ours > library, "ours {ours}, hnsw_rs's {library}");
}

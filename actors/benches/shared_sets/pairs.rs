//! The labelled pairs of the SQL cache bench and the accuracy tables: raw similarities
//! (and whether the literal guard let the entry through) turned into decisions per threshold.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use anyhow::{Context, Result, ensure};
use serde::Deserialize;

use super::percentile;

/// The thresholds applied to the raw similarities.
const THRESHOLDS: [f32; 6] = [0.88, 0.90, 0.92, 0.94, 0.96, 0.98];
/// The kinds of near-miss, in the order of the tables.
const NEAR_MISSES: [&str; 5] = [
    "different_filter",
    "different_metric",
    "different_entity",
    "different_time",
    "unrelated",
];

/// One labelled pair.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Pair {
    pub(crate) id: String,
    pub(crate) lang: String,
    pub(crate) domain: String,
    pub(crate) stored: String,
    pub(crate) asked: String,
    pub(crate) same_sql: bool,
    pub(crate) kind: String,
}

/// A pair, the best similarity its lookup reported without the literal guard (0 below 0.5),
/// and whether the lookup with the guard found the entry (at 0.5).
pub(crate) struct Scored<'a> {
    pub(crate) pair: &'a Pair,
    pub(crate) similarity: f32,
    pub(crate) guard_passes: bool,
}

impl Scored<'_> {
    /// Whether the lookup hits at `threshold`, with or without the literal guard.
    pub(crate) fn hit(&self, threshold: f32, guard: bool) -> bool {
        self.similarity >= threshold && (!guard || self.guard_passes)
    }
}

/// `part` of `whole` in percent (`-` of nothing).
fn pct(part: usize, whole: usize) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// The labelled pairs, checked: unique ids, known languages and kinds, `same_sql` true for
/// paraphrases only.
pub(crate) fn load_pairs() -> Result<Vec<Pair>> {
    let pairs: Vec<Pair> = include_str!("../data/sql_cache_pairs.jsonl")
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("sql_cache_pairs.jsonl:{}", i + 1))
        })
        .collect::<Result<_>>()?;
    let mut ids = HashSet::new();
    for p in &pairs {
        ensure!(ids.insert(p.id.as_str()), "pair id {} twice", p.id);
        ensure!(matches!(p.lang.as_str(), "en" | "zh"), "{}: lang", p.id);
        let near_miss = NEAR_MISSES.contains(&p.kind.as_str());
        ensure!(
            (p.kind == "paraphrase" && p.same_sql) || (near_miss && !p.same_sql),
            "{}: kind {} with same_sql {}",
            p.id,
            p.kind,
            p.same_sql
        );
    }
    Ok(pairs)
}

/// The accuracy tables: per threshold, and the similarities by kind.
pub(crate) fn print_accuracy(pairs: &[Pair], scored: &[Scored<'_>], seconds: f64) {
    let count = |lang: &str, kind: &str| {
        pairs
            .iter()
            .filter(|p| p.lang == lang && p.kind == kind)
            .count()
    };
    let mut kinds: Vec<&str> = vec!["paraphrase"];
    kinds.extend(NEAR_MISSES);
    println!(
        "## SQL cache accuracy on {} labelled pairs ({} English, {} Chinese)\n",
        pairs.len(),
        pairs.iter().filter(|p| p.lang == "en").count(),
        pairs.iter().filter(|p| p.lang == "zh").count()
    );
    println!("| kind | en | zh |");
    println!("|---|---|---|");
    for kind in &kinds {
        println!("| {kind} | {} | {} |", count("en", kind), count("zh", kind));
    }
    println!(
        "\nEach pair: `stored` put with a SQL of its own in a domain of its own, then `asked` \
         looked up once with the tenant's `sql_similarity` at 0.5, in a tenant with \
         `literal_guard` off and in one with it on ({seconds:.1} s for all pairs); the \
         thresholds below are applied offline to the similarity those lookups reported. \
         `different_filter` covers other limits, statuses, amounts and groupings.\n"
    );

    println!("### Summary by threshold\n");
    println!(
        "| threshold | literal guard | paraphrases hit (recall) | precision of hits | false \
         hits / near-misses | en recall | en precision | zh recall | zh precision |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for t in THRESHOLDS {
        for guard in [false, true] {
            let s = Slice::of(scored, t, guard, None);
            let en = Slice::of(scored, t, guard, Some("en"));
            let zh = Slice::of(scored, t, guard, Some("zh"));
            println!(
                "| {t:.2} | {} | {} | {} | {}/{} | {} | {} | {} | {} |",
                on_off(guard),
                s.recall(),
                s.precision(),
                s.false_hits,
                s.near_misses,
                en.recall(),
                en.precision(),
                zh.recall(),
                zh.precision()
            );
        }
    }
    println!();

    for t in THRESHOLDS {
        println!("### Threshold {t:.2}\n");
        print!(
            "| slice | literal guard | paraphrases hit (recall) | precision of hits | false \
             hits |"
        );
        for kind in NEAR_MISSES {
            print!(" {kind} |");
        }
        println!();
        println!("|---|---|---|---|---|{}", "---|".repeat(NEAR_MISSES.len()));
        for guard in [false, true] {
            for (name, lang) in [("all", None), ("en", Some("en")), ("zh", Some("zh"))] {
                let s = Slice::of(scored, t, guard, lang);
                print!(
                    "| {name} | {} | {}/{} = {} | {} | {}/{} |",
                    on_off(guard),
                    s.paraphrases_hit,
                    s.paraphrases,
                    s.recall(),
                    s.precision(),
                    s.false_hits,
                    s.near_misses
                );
                for kind in NEAR_MISSES {
                    let (hit, all) = s.by_kind.get(kind).copied().unwrap_or((0, 0));
                    print!(" {hit}/{all} |");
                }
                println!();
            }
        }
        println!();
    }

    println!("### Raw similarity by kind (guard off; 0 = below 0.5), and the guard\n");
    println!("| kind | lang | pairs | min | p10 | p50 | p90 | max | the guard lets through |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for kind in &kinds {
        for lang in ["en", "zh"] {
            let of_kind: Vec<&Scored<'_>> = scored
                .iter()
                .filter(|s| s.pair.kind == *kind && s.pair.lang == lang)
                .collect();
            if of_kind.is_empty() {
                continue;
            }
            let sims: Vec<f64> = of_kind.iter().map(|s| f64::from(s.similarity)).collect();
            let passes = of_kind.iter().filter(|s| s.guard_passes).count();
            println!(
                "| {kind} | {lang} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {passes}/{} |",
                sims.len(),
                percentile(&sims, 0.0),
                percentile(&sims, 0.1),
                percentile(&sims, 0.5),
                percentile(&sims, 0.9),
                percentile(&sims, 1.0),
                of_kind.len()
            );
        }
    }
    println!();

    // Which pairs decide the threshold, by id (the texts are in the data file).
    let list = |mut xs: Vec<&Scored<'_>>, most_similar_first: bool, take: usize| {
        xs.sort_by(|a, b| a.similarity.total_cmp(&b.similarity));
        if most_similar_first {
            xs.reverse();
        }
        let shown: Vec<String> = xs
            .iter()
            .take(take)
            .map(|s| format!("{} {} {:.3}", s.pair.id, s.pair.kind, s.similarity))
            .collect();
        match shown.len() {
            0 => "none".to_owned(),
            _ => shown.join("; "),
        }
    };
    let near = |s: &&Scored<'_>| !s.pair.same_sql;
    let para = |s: &&Scored<'_>| s.pair.same_sql;
    println!(
        "Most similar near-misses: {}.\n",
        list(scored.iter().filter(near).collect(), true, 12)
    );
    println!(
        "Least similar paraphrases: {}.\n",
        list(scored.iter().filter(para).collect(), false, 12)
    );
    println!(
        "Near-misses the guard lets through at 0.92: {}.\n",
        list(
            scored
                .iter()
                .filter(near)
                .filter(|s| s.hit(0.92, true))
                .collect(),
            true,
            usize::MAX
        )
    );
    println!(
        "Paraphrases at 0.92 or more that the guard blocks: {}.\n",
        list(
            scored
                .iter()
                .filter(para)
                .filter(|s| s.similarity >= 0.92 && !s.guard_passes)
                .collect(),
            true,
            usize::MAX
        )
    );
    let domains: BTreeSet<&str> = pairs.iter().map(|p| p.domain.as_str()).collect();
    println!(
        "Domains: {}.\n",
        domains.into_iter().collect::<Vec<_>>().join(", ")
    );
}

/// How a table names the guard.
fn on_off(guard: bool) -> &'static str {
    if guard { "on" } else { "off" }
}

/// Decisions at one threshold, with or without the guard, over the pairs of one language
/// (or all).
struct Slice {
    paraphrases: usize,
    paraphrases_hit: usize,
    near_misses: usize,
    false_hits: usize,
    /// False hits and near-misses, by kind.
    by_kind: BTreeMap<&'static str, (usize, usize)>,
}

impl Slice {
    fn of(scored: &[Scored<'_>], threshold: f32, guard: bool, lang: Option<&str>) -> Slice {
        let mut s = Slice {
            paraphrases: 0,
            paraphrases_hit: 0,
            near_misses: 0,
            false_hits: 0,
            by_kind: BTreeMap::new(),
        };
        for x in scored
            .iter()
            .filter(|x| lang.is_none_or(|l| x.pair.lang == l))
        {
            let hit = x.hit(threshold, guard);
            if x.pair.same_sql {
                s.paraphrases += 1;
                s.paraphrases_hit += usize::from(hit);
            } else {
                s.near_misses += 1;
                s.false_hits += usize::from(hit);
                if let Some(kind) = NEAR_MISSES.iter().find(|k| **k == x.pair.kind) {
                    let e = s.by_kind.entry(kind).or_default();
                    e.0 += usize::from(hit);
                    e.1 += 1;
                }
            }
        }
        s
    }

    fn recall(&self) -> String {
        pct(self.paraphrases_hit, self.paraphrases)
    }

    fn precision(&self) -> String {
        pct(self.paraphrases_hit, self.paraphrases_hit + self.false_hits)
    }
}

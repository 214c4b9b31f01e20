//! `embed_corpus`: real embeddings for the vector index benchmark (`storage/benches/vector.rs`,
//! `--data file:PATH`). The `storage` crate may not depend on `inference`, so the vectors are
//! made here, once, and the benchmark reads them from a file.
//!
//! ```text
//! cargo run --release -p engram-tests --bin embed_corpus                  # 100,000 texts
//! cargo run --release -p engram-tests --bin embed_corpus -- --count 3000  # a smoke run
//! cargo bench -p engram-storage --bench vector -- --data file:target/bench-data/e5-corpus-3000.f32
//! ```
//!
//! The corpus is made of distinct texts of the evaluation data (LoCoMo, then the MemDaily
//! files in name order, from `--data DIR`, else `ENGRAM_EVAL_DATA`, else `../shared/data`
//! beside the repository: public sets under their own licences, kept outside the repository,
//! `engram_tests::retrieval::dataset`), in tiers, each tier over every session (a LoCoMo session, a
//! MemDaily trajectory) in file order, until `--count` plus [`HELD_OUT`] texts are reached:
//! 1. every turn or message as the retrieval benchmark stores it (`[date] speaker: text`, with
//!    a shared photo's caption);
//! 2. windows of 2, then of 3 consecutive turns of one session, without dates, one a line;
//! 3. each turn followed by the first sentence of the next turn, then each turn preceded by the
//!    first sentence of the previous one;
//! 4. each sentence of a turn of several sentences, alone;
//! 5. for d = 2, 3, ...: each turn followed by the first sentence of the turn d further on, then
//!    preceded by that of the turn d before;
//! 6. each turn between the first sentences of the turns before and after it;
//! 7. windows of 4, then of 5 turns.
//!
//! A text equal to an earlier one is skipped, so every text is distinct (the data give 107,620
//! in all, so `--count` goes up to 107,120), and the order is the same on every run: a small
//! `--count` takes LoCoMo's turns first. [`HELD_OUT`] texts spread evenly over that list are
//! held out of the corpus and used as queries. The other queries are [`QUESTIONS`] of the data
//! sets' questions (LoCoMo's categories 1-4 and MemDaily's, distinct, picked evenly from
//! LoCoMo's then MemDaily's list).
//!
//! The model is the pinned multilingual-e5-small (`.ci/models`), through
//! `engram_inference::Encoder`: corpus texts with the passage prefix, queries with the query
//! prefix, `--batch` texts a call, every vector L2-normalised.
//!
//! File format (read by `storage/benches/vector/file.rs`): a 20-byte header, [`MAGIC`] then
//! the dimension, the number of corpus rows and the number of query rows as `u32`
//! little-endian; then the corpus rows, then the query rows (questions first, then held-out
//! texts), each `dimension` `f32` little-endian. Rows are appended to `PATH.partial`, which
//! a later run continues if its header matches, and renamed to `PATH` at the end; a `PATH`
//! whose header and length match is left as it is.
//!
//! It prints counts, lengths and rates, never a text.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use engram_inference::{Encoder, EncoderConfig, ModelKind, TextRole};
use engram_tests::retrieval::dataset::{self, PassageStyle};

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"ENGRVEC1";
/// Magic, dimension, corpus rows, query rows.
const HEADER_LEN: u64 = 20;
/// Corpus texts held out as queries.
const HELD_OUT: usize = 500;
/// Questions used as queries.
const QUESTIONS: usize = 500;
/// A progress line every this many texts.
const PROGRESS_EVERY: usize = 4000;

/// Embeds a corpus of LoCoMo and MemDaily texts and queries with multilingual-e5-small for
/// the vector index benchmark.
#[derive(Debug, Parser)]
#[command(name = "embed_corpus", about)]
struct Args {
    /// Corpus texts (the queries come on top).
    #[arg(long, default_value_t = 100_000)]
    count: usize,
    /// Output file (default: `target/bench-data/e5-corpus-{count}.f32` of the workspace).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Texts in one call to the encoder.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Print what the corpus is made of, and stop before loading the model.
    #[arg(long)]
    dry_run: bool,
    /// The evaluation data directory (default: `ENGRAM_EVAL_DATA`, else `../shared/data`
    /// beside the repository).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// One session's turns, as stored (with dates) and plain (without).
struct Session {
    stored: Vec<String>,
    plain: Vec<String>,
}

/// How one tier derives texts from a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Each turn as stored.
    Turn,
    /// Windows of this many consecutive turns.
    Window(usize),
    /// Each turn, then the first sentence of the turn this far on.
    After(usize),
    /// The first sentence of the turn this far back, then each turn.
    Before(usize),
    /// Each sentence of a turn of several sentences.
    Sentences,
    /// The previous turn's first sentence, the turn, the next turn's first sentence.
    Around,
}

impl Tier {
    /// The line of the report it counts in (turns 2 or more apart share one).
    fn group(self) -> String {
        match self {
            Tier::Turn => "turns as stored".to_owned(),
            Tier::Window(w) => format!("windows of {w} turns"),
            Tier::After(1) => "turn + next turn's first sentence".to_owned(),
            Tier::Before(1) => "previous turn's first sentence + turn".to_owned(),
            Tier::After(_) | Tier::Before(_) => {
                "turn with the first sentence of a turn 2+ apart".to_owned()
            }
            Tier::Sentences => "single sentences of longer turns".to_owned(),
            Tier::Around => "turn between its neighbours' first sentences".to_owned(),
        }
    }

    /// The tier's texts from one session, in order (duplicates included).
    fn texts(self, session: &Session) -> Vec<String> {
        let plain = &session.plain;
        let n = plain.len();
        match self {
            Tier::Turn => session.stored.clone(),
            Tier::Window(w) => plain.windows(w).map(|turns| turns.join("\n")).collect(),
            Tier::After(d) => (0..n.saturating_sub(d))
                .map(|i| format!("{}\n{}", plain[i], first_sentence(&plain[i + d])))
                .collect(),
            Tier::Before(d) => (d..n)
                .map(|i| format!("{}\n{}", first_sentence(&plain[i - d]), plain[i]))
                .collect(),
            Tier::Sentences => plain
                .iter()
                .map(|turn| sentences(turn))
                .filter(|s| s.len() > 1)
                .flatten()
                .map(str::to_owned)
                .collect(),
            Tier::Around => plain
                .windows(3)
                .map(|t| {
                    let (before, after) = (first_sentence(&t[0]), first_sentence(&t[2]));
                    format!("{before}\n{}\n{after}", t[1])
                })
                .collect(),
        }
    }
}

/// The sentences of `text`: cut after `.`, `!` or `?` followed by white space, and after
/// `。`, `！` or `？`.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let latin = matches!(c, '.' | '!' | '?')
            && chars.peek().is_some_and(|(_, next)| next.is_whitespace());
        if latin || matches!(c, '。' | '！' | '？') {
            let end = i + c.len_utf8();
            let sentence = text[start..end].trim();
            if !sentence.is_empty() {
                out.push(sentence);
            }
            start = end;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

fn first_sentence(text: &str) -> &str {
    sentences(text).first().copied().unwrap_or(text)
}

/// Up to `limit` distinct texts, tier after tier, with how many each line of the report
/// ([`Tier::group`]) gave and their total length in characters.
fn derive(sessions: &[Session], limit: usize) -> (Vec<String>, Vec<(String, usize, usize)>) {
    let longest = sessions.iter().map(|s| s.plain.len()).max().unwrap_or(0);
    let mut tiers = vec![
        Tier::Turn,
        Tier::Window(2),
        Tier::Window(3),
        Tier::After(1),
        Tier::Before(1),
        Tier::Sentences,
    ];
    for d in 2..longest {
        tiers.extend([Tier::After(d), Tier::Before(d)]);
    }
    tiers.extend([Tier::Around, Tier::Window(4), Tier::Window(5)]);
    let mut seen = HashSet::new();
    let mut texts = Vec::new();
    let mut report: Vec<(String, usize, usize)> = Vec::new();
    for tier in tiers {
        if texts.len() >= limit {
            break;
        }
        let group = tier.group();
        if report.last().is_none_or(|(g, _, _)| *g != group) {
            report.push((group, 0, 0));
        }
        let line = report.len() - 1;
        'sessions: for session in sessions {
            for text in tier.texts(session) {
                if texts.len() >= limit {
                    break 'sessions;
                }
                if seen.insert(text.clone()) {
                    report[line].1 += 1;
                    report[line].2 += text.chars().count();
                    texts.push(text);
                }
            }
        }
    }
    (texts, report)
}

/// Splits `texts` into the corpus and `held` texts spread evenly over it (the last of every
/// `len / held`).
fn hold_out(texts: Vec<String>, held: usize) -> (Vec<String>, Vec<String>) {
    let stride = (texts.len() / held.max(1)).max(1);
    let (mut corpus, mut out) = (Vec::new(), Vec::new());
    for (i, text) in texts.into_iter().enumerate() {
        if i % stride == stride - 1 && out.len() < held {
            out.push(text);
        } else {
            corpus.push(text);
        }
    }
    (corpus, out)
}

/// `n` items spread evenly over `items`, in order (all of them if there are fewer).
fn spread<T: Clone>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n {
        return items.to_vec();
    }
    (0..n).map(|i| items[i * items.len() / n].clone()).collect()
}

/// Every session of `files` (as stored and plain) and every distinct question, in order.
fn load(files: &[PathBuf]) -> Result<(Vec<Session>, Vec<String>)> {
    let stored_style = PassageStyle {
        dates: true,
        speakers: true,
        captions: true,
    };
    let plain_style = PassageStyle {
        dates: false,
        ..stored_style
    };
    let mut sessions = Vec::new();
    let mut questions = Vec::new();
    let mut seen = HashSet::new();
    for file in files {
        let stored = dataset::load(file, stored_style)?;
        let plain = dataset::load(file, plain_style)?;
        for (s, p) in stored.conversations.iter().zip(&plain.conversations) {
            ensure!(s.passages.len() == p.passages.len(), "styles disagree");
            let mut at = 0;
            while at < s.passages.len() {
                let name = &s.passages[at].session;
                let end = at
                    + s.passages[at..]
                        .iter()
                        .take_while(|x| x.session == *name)
                        .count();
                sessions.push(Session {
                    stored: s.passages[at..end].iter().map(|x| x.text.clone()).collect(),
                    plain: p.passages[at..end].iter().map(|x| x.text.clone()).collect(),
                });
                at = end;
            }
            for q in &s.questions {
                if seen.insert(q.text.clone()) {
                    questions.push(q.text.clone());
                }
            }
        }
    }
    Ok((sessions, questions))
}

fn header(dim: usize, n_corpus: usize, n_queries: usize) -> Result<Vec<u8>> {
    let mut out = MAGIC.to_vec();
    for n in [dim, n_corpus, n_queries] {
        out.extend_from_slice(&u32::try_from(n)?.to_le_bytes());
    }
    Ok(out)
}

/// The header of `path` (dimension, corpus rows, query rows) and its length, if it has one.
fn read_header(path: &Path) -> Option<([usize; 3], u64)> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut bytes = [0u8; HEADER_LEN as usize];
    file.read_exact(&mut bytes).ok()?;
    if &bytes[..8] != MAGIC {
        return None;
    }
    let field = |i: usize| {
        let b: [u8; 4] = bytes[8 + 4 * i..12 + 4 * i].try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    Some(([field(0)?, field(1)?, field(2)?], len))
}

fn row_bytes(dim: usize) -> u64 {
    (dim * 4) as u64
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.count > 0 && args.batch > 0,
        "--count and --batch must be positive"
    );
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../target/bench-data")
            .join(format!("e5-corpus-{}.f32", args.count))
    });

    let files = dataset::default_files(&dataset::data_dir(args.data.as_deref())?)?;
    let (sessions, all_questions) = load(&files)?;
    let turns: usize = sessions.iter().map(|s| s.plain.len()).sum();
    let (texts, tiers) = derive(&sessions, args.count + HELD_OUT);
    println!(
        "{} files, {} sessions, {turns} turns, {} distinct questions",
        files.len(),
        sessions.len(),
        all_questions.len()
    );
    for (group, added, chars) in &tiers {
        let mean = chars / added.max(&1);
        println!("  {group:<48} {added:>7} texts, mean {mean:>3} characters");
    }
    if texts.len() < args.count + HELD_OUT {
        bail!(
            "the data yield {} distinct texts, fewer than --count {} plus {HELD_OUT} held out",
            texts.len(),
            args.count
        );
    }
    let (corpus, held) = hold_out(texts, HELD_OUT);
    let questions = spread(&all_questions, QUESTIONS);
    println!(
        "corpus {} texts (passages); queries {} questions + {} held-out texts",
        corpus.len(),
        questions.len(),
        held.len()
    );
    if args.dry_run {
        return Ok(());
    }
    let n_queries = questions.len() + held.len();
    if let Some(([dim, c, q], len)) = read_header(&out)
        && c == corpus.len()
        && q == n_queries
        && len == HEADER_LEN + (c + q) as u64 * row_bytes(dim)
    {
        let out = std::fs::canonicalize(&out).unwrap_or(out);
        println!("{} is already complete: nothing to do", out.display());
        return Ok(());
    }

    let encoder = Encoder::load(&EncoderConfig {
        model: ModelKind::MultilingualE5Small,
        ..EncoderConfig::default()
    })?;
    let dim = encoder.dim();
    let head = header(dim, corpus.len(), n_queries)?;
    let partial = PathBuf::from(format!("{}.partial", out.display()));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // Continue a partial file with the same header from its last whole row.
    let done = match read_header(&partial) {
        Some((fields, len)) if header(fields[0], fields[1], fields[2])? == head => {
            usize::try_from((len - HEADER_LEN) / row_bytes(dim))?.min(corpus.len() + n_queries)
        }
        Some(_) | None => 0,
    };
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&partial)
        .with_context(|| format!("opening {}", partial.display()))?;
    file.set_len(HEADER_LEN + done as u64 * row_bytes(dim))?;
    let mut writer = BufWriter::new(file);
    if done == 0 {
        writer.write_all(&head)?;
    } else {
        writer.seek(SeekFrom::End(0))?;
        println!("continuing {} after {done} rows", partial.display());
    }

    let rows: Vec<(&str, TextRole)> = corpus
        .iter()
        .map(|t| (t.as_str(), TextRole::Passage))
        .chain(
            questions
                .iter()
                .chain(&held)
                .map(|t| (t.as_str(), TextRole::Query)),
        )
        .collect();
    println!(
        "embedding {} texts with {} on {}, {} a call",
        rows.len() - done,
        encoder.model().name(),
        encoder.device_name(),
        args.batch
    );
    let started = Instant::now();
    let mut at = done;
    while at < rows.len() {
        let role = rows[at].1;
        let end = rows[at..]
            .iter()
            .take(args.batch)
            .take_while(|(_, r)| *r == role)
            .count()
            + at;
        let batch: Vec<&str> = rows[at..end].iter().map(|(t, _)| *t).collect();
        for vector in encoder.embed(&batch, role)? {
            ensure!(
                vector.len() == dim,
                "the encoder answered a vector of another size"
            );
            for x in vector {
                writer.write_all(&x.to_le_bytes())?;
            }
        }
        if end / PROGRESS_EVERY > at / PROGRESS_EVERY || end == rows.len() {
            let secs = started.elapsed().as_secs_f64();
            #[allow(clippy::cast_precision_loss)]
            let rate = (end - done) as f64 / secs;
            #[allow(clippy::cast_precision_loss)]
            let left = (rows.len() - end) as f64 / rate / 60.0;
            println!(
                "  {end}/{} texts, {rate:.1} texts/s, about {left:.1} min left",
                rows.len()
            );
        }
        at = end;
    }
    let file = writer.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&partial, &out)
        .with_context(|| format!("renaming {} to {}", partial.display(), out.display()))?;
    let secs = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = (rows.len() - done) as f64 / secs;
    println!(
        "embedded {} texts in {secs:.1} s ({rate:.1} texts/s); wrote {}",
        rows.len() - done,
        std::fs::canonicalize(&out).unwrap_or(out).display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Session, derive, hold_out, sentences, spread};

    fn session(turns: &[&str]) -> Session {
        Session {
            stored: turns.iter().map(|t| format!("[date] {t}")).collect(),
            plain: turns.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[test]
    fn sentences_are_cut_after_latin_and_chinese_stops() {
        assert_eq!(
            sentences("A: Hi there! How are you? Fine. 3.5 km"),
            ["A: Hi there!", "How are you?", "Fine.", "3.5 km"]
        );
        assert_eq!(sentences("今天很好。明天呢？"), ["今天很好。", "明天呢？"]);
        assert_eq!(sentences("no stop"), ["no stop"]);
    }

    #[test]
    fn derived_texts_are_distinct_ordered_and_capped() {
        let sessions = [
            session(&["A: one. two", "B: three", "A: four. five", "B: six"]),
            session(&["A: one. two", "B: seven"]),
        ];
        let (all, _) = derive(&sessions, usize::MAX);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "no text twice");
        assert_eq!(all[0], "[date] A: one. two", "turns as stored come first");
        assert!(all.contains(&"A: one. two\nB: three".to_owned()));
        assert!(
            all.contains(&"A: one.\nB: six".to_owned()),
            "first sentence 3 back"
        );
        let (some, _) = derive(&sessions, 7);
        assert_eq!(some, all[..7], "a smaller count is a prefix");
    }

    #[test]
    fn held_out_texts_are_spread_and_counted() {
        let texts: Vec<String> = (0..35).map(|i| i.to_string()).collect();
        let (corpus, held) = hold_out(texts, 5);
        assert_eq!((corpus.len(), held.len()), (30, 5));
        assert_eq!(held, ["6", "13", "20", "27", "34"]);
        assert_eq!(spread(&[1, 2, 3, 4], 2), [1, 3]);
        assert_eq!(spread(&[1, 2], 5), [1, 2]);
    }
}

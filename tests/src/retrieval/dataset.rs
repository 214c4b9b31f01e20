//! Loading the evaluation sets into one shape: conversations of passages with questions whose
//! evidence is a set of passage positions.
//!
//! The sets stay outside the repository, in a directory of their own ([`data_dir`]: `--data`,
//! else `ENGRAM_EVAL_DATA`, else `../shared/data` beside the repository; its README.md says
//! where each file comes from): they are public data sets under their own terms (LoCoMo, from
//! snap-research/LoCoMo, is CC BY-NC 4.0; MemDaily comes from nuster1128/MemSim), kept
//! unchanged as their authors publish them rather than redistributed with Engram
//! (docs/architecture.md, "Evaluation data").
//!
//! LoCoMo: every turn is a passage (`dia_id`), category 5 (adversarial, no evidence) is
//! skipped and malformed evidence lists ("D8:6; D9:17") are split. MemDaily: every message
//! is a passage (`mid`), `target_step_id` is the evidence and the file's prefix the category;
//! questions the data set's generator failed to write (text "[ERRORQ]", no answer; 11 of the
//! dev set's 100 aggregative ones) are skipped and counted like questions without evidence.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use engram_storage::types::Timestamp;
use serde_json::Value;

/// How passages are written for indexing and embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassageStyle {
    /// Put the session date (LoCoMo) or message time (MemDaily) before the text.
    pub dates: bool,
    /// Put the speaker's name before the text (LoCoMo).
    pub speakers: bool,
    /// Add the caption of a shared image (LoCoMo).
    pub captions: bool,
}

/// One indexed unit: a turn or a message.
#[derive(Debug, Clone)]
pub struct Passage {
    /// Its id in the data set (`D1:3`, or a message id).
    pub id: String,
    /// The text that is indexed and embedded.
    pub text: String,
    /// The session it belongs to (a LoCoMo session, a MemDaily trajectory).
    pub session: String,
    /// When it was said, where the data set says (LoCoMo's session dates).
    pub said_at: Option<Timestamp>,
    /// For a fact distilled from another passage ([`super::facts::add`]): that passage's index. A
    /// search's hit on the fact counts as a hit on its source.
    pub source: Option<usize>,
}

/// A question with its evidence.
#[derive(Debug, Clone)]
pub struct Question {
    /// Its id for reports (`conv-26/q3`, `01_simple/12/q0`): never its text.
    pub id: String,
    /// The question.
    pub text: String,
    /// Its category's name.
    pub category: String,
    /// Positions of its evidence among the conversation's passages.
    pub evidence: Vec<usize>,
}

/// One conversation (LoCoMo sample, MemDaily trajectory): its passages in order and its
/// questions.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// Name for reports.
    pub name: String,
    /// Passages, in conversation order.
    pub passages: Vec<Passage>,
    /// Questions with at least one known evidence passage.
    pub questions: Vec<Question>,
    /// Questions skipped for having no evidence (LoCoMo category 5, empty lists).
    pub skipped_questions: usize,
    /// Evidence ids that name no passage (dropped from their question).
    pub unknown_evidence: usize,
}

/// A loaded file.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// Which set: "LoCoMo" or "MemDaily".
    pub kind: &'static str,
    /// Conversations.
    pub conversations: Vec<Conversation>,
}

/// Which half of the evaluation data a conversation belongs to: settings are tuned on the
/// tuning half only, and the checking half says how far that tuning carries to conversations
/// it never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Half {
    /// Tune on these.
    Tuning,
    /// Check on these.
    Checking,
}

impl Half {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Half::Tuning => "tuning half",
            Half::Checking => "checking half",
        }
    }
}

/// Splits a file's conversations into its tuning and checking halves, the same way on every
/// run: LoCoMo conversations by sample id, the first three fifths (rounded up) tuning and the
/// rest checking (in the dev file: conv-26, 30 and 41 tune, 42 and 43 check); MemDaily
/// trajectories by their place in the file, even ones tuning and odd ones checking.
pub fn split(set: Dataset) -> (Dataset, Dataset) {
    let Dataset {
        kind,
        mut conversations,
    } = set;
    let tuning: Vec<bool> = if kind == "LoCoMo" {
        conversations.sort_by(|a, b| a.name.cmp(&b.name));
        let cut = (conversations.len() * 3).div_ceil(5);
        (0..conversations.len()).map(|i| i < cut).collect()
    } else {
        (0..conversations.len()).map(|i| i % 2 == 0).collect()
    };
    let (mut tune, mut check) = (Vec::new(), Vec::new());
    for (conversation, tunes) in conversations.into_iter().zip(tuning) {
        if tunes {
            tune.push(conversation);
        } else {
            check.push(conversation);
        }
    }
    (
        Dataset {
            kind,
            conversations: tune,
        },
        Dataset {
            kind,
            conversations: check,
        },
    )
}

/// The conversations of `file` as one: passages concatenated in order, evidence shifted.
pub fn pool(file: &Path, conversations: Vec<Conversation>) -> Conversation {
    let mut out = Conversation {
        name: file.display().to_string(),
        passages: Vec::new(),
        questions: Vec::new(),
        skipped_questions: 0,
        unknown_evidence: 0,
    };
    for mut c in conversations {
        let offset = out.passages.len();
        for q in &mut c.questions {
            q.evidence.iter_mut().for_each(|e| *e += offset);
        }
        out.passages.append(&mut c.passages);
        out.questions.append(&mut c.questions);
        out.skipped_questions += c.skipped_questions;
        out.unknown_evidence += c.unknown_evidence;
    }
    out
}

/// The `D<session>:<turn>` ids in an evidence string, however they are separated
/// ("D8:6; D9:17", "D8:6 D9:17").
fn dia_ids(evidence: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in evidence.match_indices('D') {
        let rest = &evidence[at + 1..];
        let session: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Some(after) = rest[session.len()..].strip_prefix(':') else {
            continue;
        };
        let turn: String = after.chars().take_while(char::is_ascii_digit).collect();
        if !session.is_empty() && !turn.is_empty() {
            out.push(format!("D{session}:{turn}"));
        }
    }
    out
}

/// The environment variable naming the directory of the evaluation sets.
pub const DATA_ENV: &str = "ENGRAM_EVAL_DATA";

/// The directory of the evaluation sets: `given` (a program's `--data`), else the directory
/// `ENGRAM_EVAL_DATA` names, else `../shared/data` beside the repository (the sets are public
/// data under their own licences, kept outside the repository: the module's documentation).
/// A relative path is read from the directory the program runs in. A directory that is not
/// there is an error naming `--data` and `ENGRAM_EVAL_DATA`.
pub fn data_dir(given: Option<&Path>) -> Result<PathBuf> {
    let (data, from) = match (given, std::env::var_os(DATA_ENV).filter(|v| !v.is_empty())) {
        (Some(dir), _) => (dir.to_path_buf(), "--data"),
        (None, Some(dir)) => (PathBuf::from(dir), DATA_ENV),
        (None, None) => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
            "the default, ../shared/data beside the repository",
        ),
    };
    if !data.is_dir() {
        bail!(
            "the evaluation data directory {} ({from}) is not there: pass --data DIR or set \
             {DATA_ENV} to the directory holding locomo-dev.json and memdaily-dev/ (the sets \
             are public data kept outside the repository)",
            data.display()
        );
    }
    Ok(data)
}

/// Every evaluation file under `data` ([`data_dir`]): `locomo-dev.json`, then
/// `memdaily-dev/*.json` in name order.
pub fn default_files(data: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![data.join("locomo-dev.json")];
    let mut memdaily: Vec<PathBuf> = std::fs::read_dir(data.join("memdaily-dev"))
        .with_context(|| format!("listing {}/memdaily-dev", data.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    memdaily.sort();
    files.extend(memdaily);
    Ok(files)
}

/// Loads a LoCoMo or MemDaily file, telling them apart by shape.
pub fn load(path: &Path, style: PassageStyle) -> Result<Dataset> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let Some(items) = value.as_array() else {
        bail!("{}: not a JSON array", path.display());
    };
    let first = items.first();
    if first.is_some_and(|v| v.get("conversation").is_some()) {
        load_locomo(items, style)
    } else if first.is_some_and(|v| v.get("message_list").is_some()) {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("memdaily");
        let category = stem.trim_end_matches("_roles").to_owned();
        load_memdaily(items, &category, style)
    } else {
        bail!("{}: neither LoCoMo nor MemDaily", path.display())
    }
}

/// Each passage's index by id.
fn positions(passages: &[Passage]) -> HashMap<&str, usize> {
    passages
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i))
        .collect()
}

fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) | None => String::new(),
    }
}

fn locomo_category(n: u64) -> &'static str {
    match n {
        1 => "1 multi-hop",
        2 => "2 temporal",
        3 => "3 open-domain",
        4 => "4 single-hop",
        _ => "other",
    }
}

fn load_locomo(items: &[Value], style: PassageStyle) -> Result<Dataset> {
    let mut out = Dataset {
        kind: "LoCoMo",
        ..Dataset::default()
    };
    for item in items {
        let conv = item
            .get("conversation")
            .context("sample without conversation")?;
        let mut sessions: Vec<(u64, &Vec<Value>)> = conv
            .as_object()
            .context("conversation is not an object")?
            .iter()
            .filter_map(|(key, v)| {
                let n = key.strip_prefix("session_")?.parse::<u64>().ok()?;
                Some((n, v.as_array()?))
            })
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let mut passages = Vec::new();
        for (n, turns) in sessions {
            let date = text(conv, &format!("session_{n}_date_time"));
            for turn in turns {
                let mut body = String::new();
                if style.dates && !date.is_empty() {
                    body.push_str(&format!("[{date}] "));
                }
                if style.speakers {
                    body.push_str(&format!("{}: ", text(turn, "speaker")));
                }
                body.push_str(&text(turn, "text"));
                let caption = text(turn, "blip_caption");
                if style.captions && !caption.is_empty() {
                    body.push_str(&format!(" (shares a photo: {caption})"));
                }
                passages.push(Passage {
                    id: text(turn, "dia_id"),
                    text: body,
                    session: format!("session-{n}"),
                    said_at: session_time(&date),
                    source: None,
                });
            }
        }
        let position = positions(&passages);
        let mut questions = Vec::new();
        let (mut skipped, mut unknown) = (0, 0);
        let sample = text(item, "sample_id");
        for (index, qa) in item
            .get("qa")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let category = qa.get("category").and_then(Value::as_u64).unwrap_or(0);
            let mut evidence = Vec::new();
            for e in qa
                .get("evidence")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for id in dia_ids(e.as_str().unwrap_or("")) {
                    match position.get(id.as_str()) {
                        Some(&i) if !evidence.contains(&i) => evidence.push(i),
                        Some(_) => {}
                        None => unknown += 1,
                    }
                }
            }
            if category == 5 || evidence.is_empty() {
                skipped += 1;
                continue;
            }
            questions.push(Question {
                id: format!("{sample}/q{index}"),
                text: text(qa, "question"),
                category: locomo_category(category).to_owned(),
                evidence,
            });
        }
        out.conversations.push(Conversation {
            name: sample,
            passages,
            questions,
            skipped_questions: skipped,
            unknown_evidence: unknown,
        });
    }
    Ok(out)
}

fn load_memdaily(items: &[Value], category: &str, style: PassageStyle) -> Result<Dataset> {
    let mut out = Dataset {
        kind: "MemDaily",
        ..Dataset::default()
    };
    for (trajectory, item) in items.iter().enumerate() {
        let mut passages = Vec::new();
        for m in item
            .get("message_list")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let time = text(m, "time");
            let body = if style.dates && !time.is_empty() {
                format!("[{time}] {}", text(m, "message"))
            } else {
                text(m, "message")
            };
            passages.push(Passage {
                id: text(m, "mid"),
                text: body,
                session: format!("trajectory-{trajectory}"),
                said_at: None,
                source: None,
            });
        }
        let position = positions(&passages);
        let mut questions = Vec::new();
        let (mut skipped, mut unknown) = (0, 0);
        let tid = text(item, "tid");
        for (index, q) in item
            .get("question_list")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let mut evidence = Vec::new();
            for mid in q
                .get("target_step_id")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = match mid {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.clone(),
                    Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => {
                        String::new()
                    }
                };
                match position.get(id.as_str()) {
                    Some(&i) if !evidence.contains(&i) => evidence.push(i),
                    Some(_) => {}
                    None => unknown += 1,
                }
            }
            // The generator's failed questions read "[ERRORQ]" and have no answer: they ask
            // nothing, whatever their evidence list says.
            let failed = q.get("answer").is_none_or(Value::is_null)
                || text(q, "question").contains("[ERRORQ]");
            if evidence.is_empty() || failed {
                skipped += 1;
                continue;
            }
            questions.push(Question {
                id: format!("{category}/{tid}/q{index}"),
                text: text(q, "question"),
                category: category.to_owned(),
                evidence,
            });
        }
        out.conversations.push(Conversation {
            name: format!("{category}/{tid}"),
            passages,
            questions,
            skipped_questions: skipped,
            unknown_evidence: unknown,
        });
    }
    Ok(out)
}

/// A LoCoMo session's date and time (`1:56 pm on 8 May, 2023`), read as UTC.
fn session_time(date: &str) -> Option<Timestamp> {
    let t = chrono::NaiveDateTime::parse_from_str(date, "%I:%M %p on %d %B, %Y").ok()?;
    Some(Timestamp(t.and_utc().timestamp_millis()))
}

#[cfg(test)]
mod tests {
    use engram_storage::types::Timestamp;

    use super::{Conversation, Dataset, PassageStyle, dia_ids, load, session_time, split};

    #[test]
    fn locomo_session_dates_are_read_as_utc_times() {
        // 2023-05-08T13:56:00Z and 2023-10-13T10:37:00Z.
        assert_eq!(
            session_time("1:56 pm on 8 May, 2023"),
            Some(Timestamp(1_683_554_160_000))
        );
        assert_eq!(
            session_time("10:37 am on 13 October, 2023"),
            Some(Timestamp(1_697_193_420_000))
        );
        assert_eq!(session_time(""), None);
        assert_eq!(session_time("sometime in May"), None);
    }

    fn named(names: &[&str], kind: &'static str) -> Dataset {
        Dataset {
            kind,
            conversations: names
                .iter()
                .map(|name| Conversation {
                    name: (*name).to_owned(),
                    passages: Vec::new(),
                    questions: Vec::new(),
                    skipped_questions: 0,
                    unknown_evidence: 0,
                })
                .collect(),
        }
    }

    fn names(set: &Dataset) -> Vec<&str> {
        set.conversations.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn the_halves_are_the_same_on_every_run_and_never_overlap() {
        let locomo = ["conv-43", "conv-26", "conv-42", "conv-30", "conv-41"];
        let (tuning, checking) = split(named(&locomo, "LoCoMo"));
        assert_eq!(names(&tuning), ["conv-26", "conv-30", "conv-41"]);
        assert_eq!(names(&checking), ["conv-42", "conv-43"]);
        let (tuning, checking) = split(named(&["t0", "t1", "t2", "t3", "t4"], "MemDaily"));
        assert_eq!(names(&tuning), ["t0", "t2", "t4"], "even trajectories tune");
        assert_eq!(names(&checking), ["t1", "t3"]);
    }

    #[test]
    fn malformed_evidence_lists_are_split() {
        assert_eq!(dia_ids("D8:6; D9:17"), ["D8:6", "D9:17"]);
        assert_eq!(dia_ids("D1:3"), ["D1:3"]);
        assert_eq!(dia_ids("D10:2 D:5 D3"), ["D10:2"]);
        assert!(dia_ids("").is_empty());
    }

    #[test]
    fn memdaily_questions_the_generator_failed_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("04_aggregative_roles.json");
        let messages = r#"[{"mid": 0, "message": "m0", "time": "t", "place": "p"},
                           {"mid": 1, "message": "m1", "time": "t", "place": "p"}]"#;
        let file = format!(
            r#"[{{"tid": 7, "message_list": {messages}, "question_list": [
                {{"qid": 0, "question": "[ERRORQ]", "answer": null, "target_step_id": [0, 1]}},
                {{"qid": 1, "question": "how many?", "answer": "2", "target_step_id": [0, 1]}}
            ]}}]"#
        );
        std::fs::write(&path, file).unwrap();
        let style = PassageStyle {
            dates: false,
            speakers: false,
            captions: false,
        };
        let set = load(&path, style).unwrap();
        let conversation = &set.conversations[0];
        assert_eq!(
            conversation.skipped_questions, 1,
            "the failed question is counted"
        );
        assert_eq!(conversation.questions.len(), 1);
        assert_eq!(conversation.questions[0].id, "04_aggregative/7/q1");
        assert_eq!(conversation.questions[0].evidence, [0, 1]);
    }
}

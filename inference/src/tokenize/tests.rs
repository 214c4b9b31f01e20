//! The installed multilingual-e5-small tokenizer read as [`Pieces`] against the crate's own
//! Unigram, on every text of the evaluation sets.

use std::path::PathBuf;

use tokenizers::Tokenizer;

use super::{Inner, TextTokenizer};
use crate::config::{ModelKind, default_model_dir};

/// The evaluation sets' directory: `ENGRAM_EVAL_DATA`, else `../shared/data` beside the
/// repository; the test fails, naming both, where it is missing.
fn eval_data() -> PathBuf {
    let dir = std::env::var_os("ENGRAM_EVAL_DATA")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
            PathBuf::from,
        );
    assert!(
        dir.join("locomo-dev.json").is_file(),
        "no locomo-dev.json in {} (set ENGRAM_EVAL_DATA to the evaluation sets' directory)",
        dir.display()
    );
    dir
}

/// Every string in `value`, recursively.
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

fn texts() -> Vec<String> {
    let data = eval_data();
    let mut files = vec![data.join("locomo-dev.json")];
    let mut memdaily: Vec<PathBuf> = std::fs::read_dir(data.join("memdaily-dev"))
        .expect("reading memdaily-dev")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    memdaily.sort();
    assert!(
        !memdaily.is_empty(),
        "no MemDaily files in {}",
        data.display()
    );
    files.extend(memdaily);
    let mut out = Vec::new();
    for file in files {
        let value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).expect("reading a set")).expect("JSON");
        strings(&value, &mut out);
    }
    out.sort();
    out.dedup();
    out.extend(
        [
            "",
            " ",
            "\u{0}\u{7}tab\there",
            "emoji 🧠🫠 and ZWJ 👩‍👩‍👧",
            "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
            "ﬁ ligature, Å, e\u{301}",
            "ᚠᛇᚻ ᛒᛦᚦ runes ꙮ",
            "日本語とかな、한국어, ไทย, العربية, עברית",
            "\u{10FFFF}\u{E000}",
        ]
        .map(str::to_owned),
    );
    out.push("long ".repeat(800));
    out
}

#[test]
fn e5_pieces_tokenise_every_evaluation_text_as_the_crates_unigram_does() {
    let path = ModelKind::MultilingualE5Small
        .dir(&default_model_dir())
        .join("tokenizer.json");
    let ours = TextTokenizer::from_file(&path, 512, "<pad>").expect("our tokenizer");
    assert!(
        matches!(*ours.inner, Inner::Pieces(_)),
        "XLM-R's Unigram model should be read as sorted pieces"
    );
    let mut theirs = Tokenizer::from_file(&path).expect("the crate's tokenizer");
    theirs
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 512,
            ..Default::default()
        }))
        .expect("truncation");
    theirs.with_padding(None);
    assert_eq!(ours.vocab_size(), theirs.get_vocab_size(true));
    for id in [0, 1, 2, 3, 6, 250_001] {
        assert_eq!(ours.id_to_token(id), theirs.id_to_token(id), "id {id}");
    }
    let texts = texts();
    assert!(texts.len() > 5_000, "only {} texts", texts.len());
    for prefix in ["query: ", "passage: "] {
        for chunk in texts.chunks(512) {
            let ids = ours.encode(chunk, prefix).expect("encoding");
            let inputs: Vec<String> = chunk.iter().map(|t| format!("{prefix}{t}")).collect();
            let expected = theirs.encode_batch(inputs, true).expect("encoding");
            for ((text, ids), expected) in chunk.iter().zip(ids).zip(expected) {
                // The text itself is evaluation data, not a user's; only its length is shown.
                assert_eq!(
                    ids,
                    expected.get_ids(),
                    "a text of {} bytes tokenised differently",
                    text.len()
                );
            }
        }
    }
}

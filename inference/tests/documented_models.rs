//! Every model name the documentation and the reference configuration mention is one the
//! configuration accepts, and that model loads and embeds: a name written in `cluster.toml`,
//! README or `docs/` that the node would reject at start fails here (`all-minilm-l6-v2` once
//! did: serde's kebab-case made the variant `all-mini-lm-l6-v2`).
//!
//! Names are found as quoted or backticked words naming a known model family (`e5`, `minilm`);
//! the models must be installed (`.ci/models`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use engram_inference::{DeviceChoice, Encoder, EncoderConfig, ModelKind, TextRole};

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `README.md`, `cluster.toml` and every Markdown file under `docs/`.
fn documents() -> Result<Vec<PathBuf>> {
    let root = workspace_root();
    let mut files = vec![root.join("README.md"), root.join("cluster.toml")];
    for entry in std::fs::read_dir(root.join("docs")).context("docs/")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    Ok(files)
}

/// Quoted (`"..."`) or backticked words that name a model of a known family.
fn model_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for quote in ['"', '`'] {
        for (i, piece) in text.split(quote).enumerate() {
            let is_name = i % 2 == 1
                && !piece.is_empty()
                && piece
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            let lower = piece.to_ascii_lowercase();
            if is_name && (lower.contains("minilm") || lower.contains("e5-")) {
                names.insert(piece.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_name_finder_sees_quoted_and_backticked_model_names_only() {
    let found = model_names(r#"model = "all-minilm-l6-v2" or `multilingual-e5-small`; e5-small"#);
    let want: BTreeSet<String> = ["all-minilm-l6-v2", "multilingual-e5-small"]
        .map(String::from)
        .into();
    assert_eq!(found, want);
}

#[test]
fn every_model_name_in_the_docs_is_accepted_and_loads() -> Result<()> {
    let mut named = BTreeSet::new();
    for file in documents()? {
        let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
        named.extend(model_names(&text));
    }
    // The reference configuration names both models: a finder that sees nothing fails.
    ensure!(named.len() >= 2, "found only {named:?} in the docs");
    for name in &named {
        let model: ModelKind = serde_json::from_value(serde_json::Value::String(name.clone()))
            .with_context(|| format!("the docs name the model {name:?}, which is rejected"))?;
        ensure!(model.name() == name, "{name:?} parses as {}", model.name());
        let encoder = Encoder::load(&EncoderConfig {
            model,
            device: DeviceChoice::Cpu,
            ..EncoderConfig::default()
        })
        .with_context(|| format!("{name} does not load"))?;
        let vectors = encoder.embed(&["a documented model embeds".to_owned()], TextRole::Query)?;
        ensure!(vectors.len() == 1 && vectors[0].len() == encoder.dim());
    }
    // And every model the code knows is accepted under its own name.
    for model in ModelKind::ALL {
        let parsed: ModelKind =
            serde_json::from_value(serde_json::Value::String(model.name().to_owned()))?;
        ensure!(parsed == model, "{} does not parse as itself", model.name());
    }
    Ok(())
}

//! The pool's start on files that do not load (no model is needed): what is checked at once,
//! and what a load on the decoding thread answers when it fails.

use super::*;
use crate::distil::{intent_prompt, intent_schema};
use crate::gguf::tests::{Writer, write};

fn config(file: &tempfile::NamedTempFile) -> GenerationConfig {
    let path = file.path();
    GenerationConfig {
        model_dir: path.parent().unwrap().to_path_buf(),
        model: PathBuf::from(path.file_name().unwrap()),
        device: DeviceChoice::Cpu,
        ..GenerationConfig::default()
    }
}

fn generation() -> Generation {
    let types = vec!["appointment".to_owned()];
    Generation {
        system: intent_prompt(&types),
        user: "hello".into(),
        schema: Arc::new(intent_schema(&types)),
        max_tokens: 8,
    }
}

/// A GGUF file without a decoder in it reads as GGUF (the header is checked at once), then
/// fails on the decoding thread: `start` returns the load's error; `spawn` has returned the
/// pool, which answers every request, waiting or new, with the reason, and never counts
/// itself loaded.
#[tokio::test]
async fn a_model_that_fails_to_load_closes_the_pool_with_its_reason() {
    let mut w = Writer::default();
    w.string("general.architecture", "qwen2");
    let file = write(&w.bytes(32));

    let err = GenerationPool::start(config(&file))
        .await
        .unwrap_err()
        .to_string();

    let pool = GenerationPool::spawn(config(&file)).expect("the header reads");
    let answered = pool.generate("t", generation(), None).await;
    match answered {
        Err(Error::PoolStart { reason }) => {
            assert_eq!(reason, format!("the generative model did not load: {err}"));
        }
        other => panic!("expected the load's failure, got {other:?}"),
    }
    let again = pool.generate("t", generation(), None).await;
    assert!(matches!(again, Err(Error::PoolStart { .. })), "{again:?}");
    assert!(!pool.is_loaded() && !pool.stats().loaded);
    pool.join().await;
}

/// What can be known without loading fails the start at once: a missing file, a file that
/// is no GGUF.
#[tokio::test]
async fn a_missing_file_or_one_that_is_no_gguf_fails_the_spawn_at_once() {
    let file = write(b"not a model at all");
    assert!(matches!(
        GenerationPool::spawn(config(&file)),
        Err(Error::Format { .. })
    ));
    let mut missing = config(&file);
    missing.model = PathBuf::from("no-such-model.gguf");
    assert!(matches!(
        GenerationPool::spawn(missing),
        Err(Error::ModelMissing { .. })
    ));
}

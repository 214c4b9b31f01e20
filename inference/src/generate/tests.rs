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
        shots: Vec::new(),
        schema: Arc::new(intent_schema(&types)),
        max_tokens: 8,
    }
}

/// A GGUF file without a decoder in it: it reads as GGUF (the header is checked at once),
/// then fails to load on the decoding thread.
fn no_decoder() -> tempfile::NamedTempFile {
    let mut w = Writer::default();
    w.string("general.architecture", "qwen2");
    write(&w.bytes(32))
}

/// Without retries, a load that fails on the decoding thread closes the pool: `start`
/// returns the load's error (whatever the configuration says of retries); `spawn` has
/// returned the pool, which answers every request, waiting or new, with the reason, and never
/// counts itself loaded.
#[tokio::test]
async fn a_model_that_fails_to_load_closes_the_pool_with_its_reason() {
    let file = no_decoder();

    let err = GenerationPool::start(config(&file))
        .await
        .unwrap_err()
        .to_string();

    let once = GenerationConfig {
        load_retry: None,
        ..config(&file)
    };
    let pool = GenerationPool::spawn(once).expect("the header reads");
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
    assert_eq!(pool.stats().load_failures, 1);
    pool.join().await;
}

/// With retries, the decoding thread reads the file again after each failure, counting them,
/// while the pool answers requests with the last failure's reason; closing the pool ends the
/// thread in its wait. (That a retry which finds the file whole loads and serves the model is
/// `inference/tests/generate.rs`'s, on the pinned model.)
#[tokio::test]
async fn a_failed_load_is_retried_until_the_pool_closes() {
    let file = no_decoder();
    let retried = GenerationConfig {
        load_retry: Some(Duration::from_millis(1)),
        ..config(&file)
    };
    let pool = GenerationPool::spawn(retried).expect("the header reads");
    let deadline = Instant::now() + Duration::from_secs(120);
    while pool.stats().load_failures < 3 {
        assert!(Instant::now() < deadline, "three attempts within 120 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answered = pool.generate("t", generation(), None).await;
    match answered {
        Err(Error::PoolStart { reason }) => {
            assert!(
                reason.starts_with("the generative model did not load: "),
                "{reason}"
            );
        }
        other => panic!("expected the load's failure, got {other:?}"),
    }
    assert!(!pool.is_loaded());
    // The waits double: the thread is in one when the pool closes, and leaves it.
    pool.join().await;
    assert!(matches!(
        pool.generate("t", generation(), None).await,
        Err(Error::PoolStart { .. })
    ));
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

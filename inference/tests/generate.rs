//! The generation pool on the pinned Qwen2 GGUF: concurrent requests share decoding steps
//! (continuous batching) and each gets the answer it gets alone; examples shown before a
//! message are read and change its answer; every answer is valid under
//! the intent schema; one tenant past its share of the queue is refused while another is
//! still admitted; a system prompt named in the configuration is read once as the pool
//! starts; a request past its deadline is answered `Expired`; closing answers a running
//! request `PoolClosed` at the next step and the decoding thread ends; and an idle-class
//! decoder whose step ran while other threads kept every core busy rests after it. The model
//! must be installed; these tests fail, never skip, without it. Each loads the model once: one
//! as a node does (`spawn`: returned at once, the model loading on the decoding thread), the
//! other with `start` (returned once it is loaded); a load that failed is retried and serves
//! once the file is whole; closing the pool while it loads ends the load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use engram_inference::distil::shots::{DEFAULT_SHOTS, ShotLibrary};
use engram_inference::distil::{
    DEFAULT_INTENT_TYPES, MAX_ANSWER_TOKENS, NO_INTENT, intent_prompt, intent_schema, parse_answer,
};
use engram_inference::{
    BackgroundPriority, DeviceChoice, Error, Generation, GenerationConfig, GenerationPool,
};

mod support;

use support::{BusyCores, wait_for, wait_until_idle_class};

fn generation(message: &str) -> Generation {
    let types: Vec<String> = DEFAULT_INTENT_TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    Generation {
        system: intent_prompt(&types),
        user: message.to_owned(),
        shots: Vec::new(),
        schema: Arc::new(intent_schema(&types)),
        max_tokens: MAX_ANSWER_TOKENS,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_share_decoding_steps_and_the_queue_is_fair_and_bounded() {
    // As a node starts it: returned at once, the model loading on the decoding thread.
    let pool = GenerationPool::spawn(GenerationConfig {
        device: DeviceChoice::Cpu,
        max_batch: 4,
        queue_capacity: 4,
        tenant_share_percent: 50,
        priority: BackgroundPriority::Normal,
        system_prompts: vec![generation("").system],
        ..GenerationConfig::default()
    })
    .expect("the generative model is installed (.ci/models)");

    // The intent prompt's prefix is computed once the model is loaded; then the first request
    // reads only its own message.
    wait_for(Duration::from_secs(600), "the warmed prefix", || {
        pool.stats().prompt_tokens > 0
    })
    .await
    .unwrap();
    assert!(pool.is_loaded() && pool.stats().loaded);
    let warmed = pool.stats().prompt_tokens;

    // Alone first: the reference answer of one message.
    let alone = pool
        .generate("a", generation("帮我预约明天上午十点的牙科检查"), None)
        .await
        .unwrap();
    let read = pool.stats().prompt_tokens - warmed;
    assert!(
        read < 64 && warmed > 4 * read,
        "the first request read {read} prompt tokens; the prefix had {warmed}"
    );
    let alone = parse_answer(&alone).expect("valid under the schema");

    // With examples: a question after an earlier booking, shown the built-in library's
    // likest labelled messages as earlier turns, is read as no new intent; the examples are
    // fed as prompt after the shared system prompt.
    let asked = "我上周约的那个洗牙，时间定下来了吗？";
    let types: Vec<String> = DEFAULT_INTENT_TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    let shots = ShotLibrary::builtin(None).nearest(asked, DEFAULT_SHOTS, &types);
    assert_eq!(shots.len(), DEFAULT_SHOTS);
    let before = pool.stats().prompt_tokens;
    let shown = Generation {
        shots,
        ..generation(asked)
    };
    let answer = pool.generate("a", shown, None).await.unwrap();
    let read = pool.stats().prompt_tokens - before;
    assert!(read > 100, "the examples were read: {read} prompt tokens");
    let answer = parse_answer(&answer).expect("valid under the schema");
    assert_eq!(answer.intent_type, NO_INTENT, "{answer:?}");
    // Alone, the model reads a booking into it: the examples are what changed the answer.
    let bare = pool.generate("a", generation(asked), None).await.unwrap();
    let bare = parse_answer(&bare).expect("valid under the schema");
    assert_eq!(bare.intent_type, "appointment", "{bare:?}");

    // Ten requests of tenant a at once, then one of tenant b: at most `max_batch` run and
    // a's share (2) waits, so a is refused past that; b, with nothing waiting, is admitted.
    let messages = [
        "帮我预约明天上午十点的牙科检查",
        "I want to cancel my gym membership",
        "快递五天了还没到，我要投诉",
        "Please renew my streaming plan for another year",
        "你们几点关门？",
        "帮我把宽带续费一年",
        "Book me a haircut on Friday at 3pm",
        "谢谢，再见",
        "My order arrived broken again",
        "取消视频会员",
    ];
    let mut calls = Vec::new();
    for m in messages {
        let pool = pool.clone();
        calls.push(tokio::spawn(async move {
            (m, pool.generate("a", generation(m), None).await)
        }));
    }
    let b = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.generate("b", generation("我要投诉客服态度差"), None)
                .await
        })
    };
    let mut refused = 0;
    for call in calls {
        let (message, answer) = call.await.unwrap();
        match answer {
            Ok(answer) => {
                let d = parse_answer(&answer).expect("every answer is valid under the schema");
                if message == "帮我预约明天上午十点的牙科检查" {
                    assert_eq!(d.intent_type, alone.intent_type, "batched as alone");
                    assert_eq!(d.target, alone.target, "batched as alone");
                }
            }
            Err(Error::Overloaded { .. }) => refused += 1,
            Err(other) => panic!("{message}: {other}"),
        }
    }
    assert!(
        refused >= 4,
        "only {refused} of tenant a's ten were refused"
    );
    let b = b
        .await
        .unwrap()
        .expect("tenant b is admitted beside a's backlog");
    assert!(parse_answer(&b).is_some());

    let stats = pool.stats();
    assert!(
        stats.step_sequences > stats.steps,
        "steps carried several sequences: {stats:?}"
    );
    assert_eq!(stats.refused, refused as u64);
    assert!(stats.tokens > 0 && stats.first_tokens > 0);

    // Past its deadline: not run.
    let expired = pool
        .generate("a", generation("hello"), Some(Instant::now()))
        .await;
    assert!(matches!(expired, Err(Error::Expired)), "{expired:?}");

    // Closing while a request decodes: it is answered at the next step, not run to its end,
    // and the decoding thread ends (what a stopping node waits for before it exits).
    let running = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.generate("a", generation("Book me a haircut on Friday at 3pm"), None)
                .await
        }
    });
    let tokens_before = pool.stats().tokens;
    let deadline = Instant::now() + std::time::Duration::from_secs(300);
    while pool.stats().tokens == tokens_before {
        assert!(
            Instant::now() < deadline,
            "the request never started decoding"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    pool.join().await;
    let answered = running.await.unwrap();
    assert!(
        matches!(answered, Err(Error::PoolClosed)),
        "a request running at the close is not run to its end: {answered:?}"
    );
    let closed = pool.generate("a", generation("hello"), None).await;
    assert!(matches!(closed, Err(Error::PoolClosed)), "{closed:?}");
}

/// A decoder of the idle class (its configuration, which keeps its rule of rests) whose step
/// ran while other threads kept every core busy (normal-priority work) rests before its next
/// step, and the rest is counted; closing the pool cuts the rest short.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_class_decoder_whose_step_ran_on_a_busy_machine_rests_after_it()
-> anyhow::Result<()> {
    // The rule of rests is the pool's, whatever the model: the smaller 0.5B's shorter steps
    // give more of them in a minute than the default 1.5B's.
    let pool = GenerationPool::start(GenerationConfig {
        device: DeviceChoice::Cpu,
        max_batch: 1,
        model: "qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf".into(),
        ..GenerationConfig::default()
    })
    .await
    .context("the generative model is installed (.ci/models)")?;
    wait_until_idle_class("engram-generate").await?;
    // The kernel's idle class would starve the decoder wherever other tests load the machine
    // (for hours: its prompt alone is seconds of CPU); the rests are the decoder's own rule,
    // which stays. Without CAP_SYS_NICE the kernel refuses, and the thread stays idle-class.
    let _ = engram_inference::leave_idle_class();
    let answer = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.generate("a", generation("帮我预约明天上午十点的牙科检查"), None)
                .await
        }
    });
    // Once the prompt is read (it is measured as one unit, and long) and decoding steps run,
    // normal-priority work on every core until the decoding threads have waited a second for
    // a CPU: a step or more in which other threads took nearly all the machine.
    wait_for(
        Duration::from_secs(300),
        "a decoding step after the prompt's",
        || pool.stats().tokens >= 2,
    )
    .await?;
    BusyCores::start("engram-generate")
        .until_waited(Duration::from_secs(1))
        .await?;
    // Counted once the rest ends (at most 30 s, sooner on a quiet machine).
    wait_for(Duration::from_secs(120), "a rest counted", || {
        pool.stats().rested > Duration::ZERO
    })
    .await?;
    pool.join().await;
    match answer.await? {
        Ok(answer) => ensure!(parse_answer(&answer).is_some(), "invalid under the schema"),
        Err(Error::PoolClosed) => {}
        Err(other) => anyhow::bail!("unexpected: {other}"),
    }
    Ok(())
}

/// A load that fails (here a file that is GGUF but holds no model: the header passes the
/// check at the start, the load fails on the decoding thread) is counted and answered, and
/// read again after `load-retry`: once the file is whole (an operator reinstalls it), the
/// next attempt loads it and the pool serves, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_is_retried_and_the_model_served_once_the_file_is_whole() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("model.gguf");
    // "GGUF", version 3, no tensors, no metadata.
    let empty: Vec<u8> = [&b"GGUF"[..], &3_u32.to_le_bytes(), &[0; 16]].concat();
    std::fs::write(&file, empty)?;
    let pool = GenerationPool::spawn(GenerationConfig {
        model_dir: dir.path().to_path_buf(),
        model: "model.gguf".into(),
        device: DeviceChoice::Cpu,
        priority: BackgroundPriority::Normal,
        load_retry: Some(Duration::from_millis(20)),
        ..GenerationConfig::default()
    })
    .context("the header passes the start's check")?;
    wait_for(Duration::from_secs(120), "a failed load", || {
        pool.stats().load_failures >= 1
    })
    .await?;
    let refused = pool.generate("a", generation("hello"), None).await;
    ensure!(
        matches!(refused, Err(Error::PoolStart { .. })),
        "answered {refused:?} while the model is not loaded"
    );

    // The whole model in the file's place, at once (a link renamed over it).
    let installed =
        engram_inference::default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    ensure!(installed.exists(), "the 0.5B is installed (.ci/models)");
    let link = dir.path().join("model.link");
    std::os::unix::fs::symlink(&installed, &link)?;
    std::fs::rename(&link, &file)?;
    wait_for(Duration::from_secs(600), "the retried load", || {
        pool.is_loaded()
    })
    .await?;
    let answer = pool
        .generate("a", generation("帮我预约明天上午十点的牙科检查"), None)
        .await?;
    ensure!(parse_answer(&answer).is_some(), "invalid under the schema");
    ensure!(pool.stats().loaded && pool.stats().load_failures >= 1);
    pool.join().await;
    Ok(())
}

/// Closing the pool while its model loads (a node stopped during its start) ends the load
/// between two layers: the decoding thread ends without the model, and the load is not
/// counted as failed. (Without the check the load runs to its end and the pool counts the
/// model loaded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_pool_while_its_model_loads_ends_the_load() -> anyhow::Result<()> {
    let pool = GenerationPool::spawn(GenerationConfig {
        device: DeviceChoice::Cpu,
        model: "qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf".into(),
        priority: BackgroundPriority::Normal,
        ..GenerationConfig::default()
    })
    .context("the generative model is installed (.ci/models)")?;
    pool.join().await;
    let stats = pool.stats();
    ensure!(!stats.loaded && stats.load_failures == 0, "{stats:?}");
    let refused = pool.generate("a", generation("hello"), None).await;
    ensure!(
        matches!(refused, Err(Error::PoolClosed)),
        "answered {refused:?} after the close"
    );
    Ok(())
}

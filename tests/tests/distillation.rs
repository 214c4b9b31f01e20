//! Intent distillation across real node processes: the rules' result of a message is written
//! with the write and answered at once, the generative model's result follows from the
//! background pipeline and replaces it (the 10-minute rule), intents reach the context's
//! key-intents slot, pre-warm and the seed's `/write` + `/recall`, a cancellation deactivates
//! the renewal it names, older turns get the model's summaries (stored once, extractive
//! until then), and a SIGKILL with distillations pending loses none of them.
//!
//! Nodes run the real pinned Qwen2 model where a test says so (`distilling`), without
//! embeddings (ranking by words is enough here, and it keeps the CPU for the decoder). Every
//! wait is on a condition with a deadline sized for a busy 2-core machine.

use std::time::{Duration, Instant};

use chrono::{Datelike, Timelike};
use engram_inference::distil::DEFAULT_INTENT_TYPES;
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::Intent;
use engram_storage::{Keyspace, Store, WorkQueue};
use engram_tests::chaos::{metric, queued_entries};
use engram_tests::harness::{HttpClient, NodeSpec, Sandbox, turn};
use hyper::StatusCode;
use serde_json::{Value, json};

/// How long the model (the default 1.5B, loading after the node is ready) may go without
/// progress (a token, an answer) on a busy 2-core machine; each wait below extends while it
/// progresses.
const MODEL_BOUND: Duration = Duration::from_secs(900);

/// A node that runs the generative model at normal priority, one small round at a time.
fn distilling(spec: NodeSpec) -> NodeSpec {
    spec.set("inference.enabled", false)
        .set("distillation.model", true)
        .set("distillation.generation.priority", "normal")
        .set("distillation.generation.device", "cpu")
        .set("distillation.pipeline.scan-interval", "500ms")
}

async fn recall(client: &HttpClient, user: &str, intent_type: &str, all: bool) -> Value {
    let all = if all { "&all=true" } else { "" };
    client
        .must_get(&format!(
            "/recall?user_id={user}&intent_type={intent_type}{all}"
        ))
        .await
}

/// The longest a wait for the model may last while it keeps generating (a machine that other
/// work keeps busy slows it without bound; a model that never answers still ends the test).
const MODEL_CAP: Duration = Duration::from_secs(2700);

/// Waits until `check` holds of `user`'s versions of `intent_type` (newest first): as long as
/// the node's model keeps generating tokens, or for [`MODEL_BOUND`] since it last did.
async fn versions_until(
    client: &HttpClient,
    user: &str,
    intent_type: &str,
    what: &str,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let started = Instant::now();
    let (mut tokens, mut progressed) = (0.0, Instant::now());
    loop {
        let page = recall(client, user, intent_type, true).await;
        let versions = page["intents"].as_array().cloned().unwrap_or_default();
        if check(&versions) {
            return versions;
        }
        let now = metric(client, "engram_generation_tokens_total").await;
        if now > tokens {
            (tokens, progressed) = (now, Instant::now());
        }
        assert!(
            progressed.elapsed() < MODEL_BOUND && started.elapsed() < MODEL_CAP,
            "{what}: still {versions:?} ({tokens} tokens generated, the last {:?} ago)",
            progressed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_rule_intent_is_answered_at_once_and_the_models_result_replaces_it() {
    let sandbox = Sandbox::new();
    let node = distilling(sandbox.node("distil-a")).start().await;
    let client = node.client();
    let ack = client
        .must_append_turn(
            "ann",
            &turn(
                "t1",
                "s1",
                "帮我预约明天下午三点的牙科检查",
                "好的，已为您登记。",
            ),
        )
        .await;
    assert_eq!(ack["intents"][0]["intent_type"], "appointment", "{ack}");
    assert_eq!(ack["distilling"], true);
    // The rules' version first; the model's replaces it within the window: one version.
    let versions = versions_until(&client, "ann", "appointment", "the model's version", |v| {
        v.len() == 1 && v[0]["fields"]["source"] == "model"
    })
    .await;
    let fields = &versions[0]["fields"];
    assert!(versions[0]["active"].as_bool().unwrap());
    assert!(fields["business_intent"]["target"].is_string(), "{fields}");
    assert!(fields["decision_basis"]["priority"].is_string(), "{fields}");
    assert!(metric(&client, "engram_distillation_model_answers_total").await >= 1.0);
    assert!(metric(&client, "engram_distillation_replaced_total").await >= 1.0);
    assert!(metric(&client, "engram_generation_tokens_total").await > 0.0);
    assert_eq!(metric(&client, "engram_generation_model_loaded").await, 1.0);

    let latest = recall(&client, "ann", "appointment", false).await;
    assert_eq!(latest["target_value"], fields["target_value"]);
    assert_eq!(latest["intents"].as_array().unwrap().len(), 1);

    // The context of a new session carries it in the key-intents slot.
    let ctx = client.must_context("ann", "s2", "有什么安排？").await;
    assert_eq!(ctx["intents"][0]["intent_type"], "appointment", "{ctx}");
    assert!(
        ctx["text"].as_str().unwrap().contains("Open intents"),
        "{ctx}"
    );

    // Past the six raw turns, the older ones are summarised by the model, stored once: the
    // context shows the extractive summary until then, the model's after.
    for i in 2..=8 {
        let text = format!("第{i}个问题：上个月的销售额是多少？");
        client
            .must_append_turn(
                "ann",
                &turn(&format!("t{i}"), "s1", &text, "上个月销售额为120万元。"),
            )
            .await;
    }
    // The bound is on progress: the lane answers the turns' own messages before and beside
    // the summaries, and on a loaded machine each answer may take long, but answers must
    // keep coming.
    let answered = async || {
        metric(&client, "engram_distillation_model_answers_total").await
            + metric(&client, "engram_distillation_summaries_total").await
    };
    let mut until = Instant::now() + MODEL_BOUND;
    let mut last = answered().await;
    loop {
        let now_answered = answered().await;
        if now_answered > last {
            (last, until) = (now_answered, Instant::now() + MODEL_BOUND);
        }
        let ctx = client.must_context("ann", "s1", "销售额").await;
        let summaries = ctx["summaries"].as_array().cloned().unwrap_or_default();
        assert_eq!(summaries.len(), 2, "two turns past the raw six: {ctx}");
        if summaries.iter().all(|s| s["method"] == "model") {
            for s in &summaries {
                let chars = s["text"].as_str().unwrap().chars().count();
                assert!(
                    (20..=60).contains(&chars),
                    "a summary of {chars} characters: {s}"
                );
            }
            break;
        }
        assert!(
            Instant::now() < until,
            "no model summaries yet, and no answer in {MODEL_BOUND:?}: {ctx}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(metric(&client, "engram_distillation_summaries_total").await >= 2.0);
}

/// The stored versions of `user`'s intents, of every default type, oldest first per type, with
/// the user's entries left in the distillation queue: read from the shared store.
async fn stored_answers(store: &Store, user: &str) -> (Vec<Intent>, usize) {
    let (ks, user) = (Keyspace::new("engram"), user.to_owned());
    store
        .read(move |txn| {
            let mut u = UserData::new(txn, &ks, "default", &user);
            let mut versions = Vec::new();
            for intent_type in DEFAULT_INTENT_TYPES {
                versions.extend(u.intents(intent_type)?);
            }
            Ok((versions, u.count_queued(WorkQueue::Distillation)?))
        })
        .await
        .unwrap()
}

/// Where a stored version comes from: `rule` or `model`.
fn source_of(version: &Intent) -> String {
    let fields: Value = serde_json::from_str(&version.fields).unwrap();
    fields["source"].as_str().unwrap_or_default().to_owned()
}

/// A SIGKILL with distillations pending loses none of them: each of six messages carries an
/// intent the rules find (answered at once as the rules' version); the node is SIGKILLed
/// with messages still queued for the model, read per user in the shared store (at least
/// one); after the restart the queue empties while it keeps shrinking, and each message
/// pending at the SIGKILL has its model answer stored exactly once: one version of the
/// user's is the model's, of the type the rules found, and it is the active one; beside it
/// at most the rules' version, inactive (kept when the answer came after the replace
/// window); nothing is left in the user's queue. A lost answer leaves the rules' version
/// alone; one stored twice past the window, two of the model's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_with_distillations_pending_loses_none_of_them() {
    let sandbox = Sandbox::new();
    let store = Store::sqlite(&sandbox.shared_sqlite(), SqliteOptions::default()).unwrap();
    let mut node = distilling(sandbox.shared_node("distil-k"))
        .set("distillation.generation.max-batch", 2)
        .start()
        .await;
    let client = node.client();
    let messages = [
        "I want to cancel my gym membership",
        "快递五天了还没到，太慢了",
        "Please renew my streaming plan for another year",
        "能帮我约周五下午理发吗",
        "帮我把视频会员续费一年",
        "I want to complain: my new phone arrived with a cracked screen",
    ];
    let mut rule_types = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let ack = client
            .must_post(
                "/write",
                &json!({"user_id": format!("k{i}"), "request_id": format!("w{i}"), "message": message}),
            )
            .await;
        assert_eq!(ack["distilling"], true, "{ack}");
        let rule_type = ack["intents"][0]["intent_type"].as_str();
        let rule_type =
            rule_type.unwrap_or_else(|| panic!("the rules find an intent in {message}: {ack}"));
        rule_types.push(rule_type.to_owned());
    }
    node.kill();
    // What the model still owed when the node died, per user.
    let mut owed = Vec::new();
    for (i, rule_type) in rule_types.iter().enumerate() {
        let user = format!("k{i}");
        let (versions, queued) = stored_answers(&store, &user).await;
        if queued > 0 {
            assert_eq!(queued, 1, "{user}: one message queued");
            assert!(
                versions.len() == 1
                    && source_of(&versions[0]) == "rule"
                    && versions[0].intent_type == *rule_type,
                "{user}: the rules' version alone before the model's answer: {versions:?}"
            );
            owed.push((user, rule_type.clone()));
        }
    }
    let pending = queued_entries(&sandbox, WorkQueue::Distillation).await;
    assert_eq!(pending, owed.len(), "the queue holds the messages owed");
    assert!(pending > 0, "the model had not caught up with six messages");
    node.restart().await;
    // The bound is on progress: each answer may take up to MODEL_BOUND (a loaded machine
    // decodes slowly), but the queue must keep shrinking.
    let mut until = Instant::now() + MODEL_BOUND;
    let mut last = pending;
    loop {
        let left = queued_entries(&sandbox, WorkQueue::Distillation).await;
        if left == 0 {
            break;
        }
        if left < last {
            (last, until) = (left, Instant::now() + MODEL_BOUND);
        }
        assert!(
            Instant::now() < until,
            "{left} messages still await the model, none answered in {MODEL_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every message pending at the SIGKILL has its answer stored by the restarted node, once.
    for (user, rule_type) in &owed {
        let (versions, queued) = stored_answers(&store, user).await;
        assert_eq!(queued, 0, "{user}: nothing left in the queue");
        let (models, rules): (Vec<&Intent>, Vec<&Intent>) =
            versions.iter().partition(|v| source_of(v) == "model");
        assert_eq!(
            models.len(),
            1,
            "{user}: the model's answer stored once: {versions:?}"
        );
        let answer = models[0];
        assert_eq!(answer.intent_type, *rule_type, "{user}: {versions:?}");
        assert!(answer.active, "{user}: the answer is served: {versions:?}");
        // The rules' version is replaced within the window (10 minutes), else kept inactive.
        assert!(
            rules.len() <= 1
                && rules
                    .iter()
                    .all(|r| !r.active && r.intent_type == *rule_type && source_of(r) == "rule"),
            "{user}: nothing stored but the answer and the rules' version: {versions:?}"
        );
    }
    println!(
        "{pending} of 6 distillations pending at the SIGKILL; each answer stored once after \
         the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_write_distils_by_rules_and_a_cancellation_deactivates_the_renewal() {
    let sandbox = Sandbox::new();
    // Rules only (the harness's default): the answer is complete at once.
    let node = sandbox.node("distil-r").start().await;
    let client = node.client();
    let write =
        |id: &str, message: &str| json!({"user_id": "rita", "request_id": id, "message": message});
    let ack = client
        .must_post("/write", &write("r1", "帮我把视频会员续费一年"))
        .await;
    assert_eq!(
        ack["intents"][0]["intent_type"], "subscription_renewal",
        "{ack}"
    );
    assert_eq!(ack["distilling"], false);
    let renewal = recall(&client, "rita", "subscription_renewal", false).await;
    assert_eq!(
        renewal["target_value"],
        json!({"product": "视频会员", "cycle": "yearly"}),
        "{renewal}"
    );
    // A retry is answered from the stored outcome, and writes nothing more.
    let again = client
        .must_post("/write", &write("r1", "帮我把视频会员续费一年"))
        .await;
    assert_eq!(again["replayed"], true);
    let all = recall(&client, "rita", "subscription_renewal", true).await;
    assert_eq!(all["intents"].as_array().unwrap().len(), 1);

    client
        .must_post("/write", &write("r2", "帮我取消视频会员的自动续费"))
        .await;
    let renewal = recall(&client, "rita", "subscription_renewal", false).await;
    assert!(renewal["target_value"].is_null(), "deactivated: {renewal}");
    let cancel = recall(&client, "rita", "subscription_cancel", false).await;
    assert_eq!(cancel["target_value"]["product"], "视频会员", "{cancel}");

    // Pre-warm at login: the current key intents, newest first.
    let warm = client.must_post("/v1/users/rita/prewarm", &json!({})).await;
    let types: Vec<&str> = warm["intents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["intent_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["subscription_cancel"], "{warm}");

    // A body that is both a message and an intent is refused, naming what to send.
    let both = json!({"user_id": "rita", "request_id": "r3", "message": "x",
        "intent_type": "appointment", "fields": {}});
    let reply = client.post("/write", &both).await.unwrap();
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.text().contains("either message"), "{}", reply.text());
    // A question about an intent is not a new one.
    let ack = client
        .must_post("/write", &write("r4", "我上次的投诉处理得怎么样了？"))
        .await;
    assert_eq!(ack["intents"], json!([]));
}

/// The day after `at`, at 09:00 UTC, as the seed writes instants.
fn tomorrow_at_nine(at: chrono::DateTime<chrono::Utc>) -> String {
    (at.date_naive() + chrono::Days::new(1))
        .and_hms_opt(9, 0, 0)
        .unwrap()
        .and_utc()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_seeds_examples_writes_without_request_ids_and_recalls_structured_targets()
{
    let sandbox = Sandbox::new();
    let node = sandbox.node("distil-seed").start().await;
    let client = node.client();
    // The seed's own example, as its client sends it: no request id.
    let before = chrono::Utc::now();
    let body = json!({"user_id": "test_001", "message": "我要预约明天体检"});
    let ack = client.must_post("/write", &body).await;
    let after = chrono::Utc::now();
    assert_eq!(ack["intents"][0]["intent_type"], "appointment", "{ack}");
    // A retry of the same body (a client that timed out) replays the first answer.
    let again = client.must_post("/write", &body).await;
    assert_eq!(again["replayed"], true, "{again}");
    let recalled = recall(&client, "test_001", "appointment", true).await;
    assert_eq!(
        recalled["intents"].as_array().unwrap().len(),
        1,
        "{recalled}"
    );
    let target = &recalled["target_value"];
    let time = target["time"].as_str().expect("an object with a time");
    assert!(
        [tomorrow_at_nine(before), tomorrow_at_nine(after)].contains(&time.to_owned()),
        "明天 resolved against the message's time: {target}"
    );
    assert!(target["location"].is_null(), "{target}");

    // A place and a day of next week, as written and resolved.
    client
        .must_post(
            "/write",
            &json!({"user_id": "test_002", "message": "我想预约下周三上午去社保中心办理养老认证"}),
        )
        .await;
    let target = recall(&client, "test_002", "appointment", false).await["target_value"].clone();
    assert_eq!(target["location"], "社保中心", "{target}");
    let time = chrono::DateTime::parse_from_rfc3339(target["time"].as_str().unwrap()).unwrap();
    assert_eq!(
        (time.weekday(), time.hour()),
        (chrono::Weekday::Wed, 9),
        "{target}"
    );

    // The seed's cancellation example, for a user with no renewal on record.
    let ack = client
        .must_post(
            "/write",
            &json!({"user_id": "test_003", "message": "我不需要续订了"}),
        )
        .await;
    assert_eq!(
        ack["intents"][0]["intent_type"], "subscription_cancel",
        "{ack}"
    );
    let cancel = recall(&client, "test_003", "subscription_cancel", false).await;
    assert_eq!(
        cancel["target_value"],
        json!({"product": null, "cycle": null}),
        "{cancel}"
    );

    // A gateway's own object target is answered as written, not as "".
    client
        .must_post(
            "/write",
            &json!({"user_id": "test_004", "intent_type": "appointment",
                "fields": {"target_value": {"time": "2024-06-16T09:00:00Z", "location": "体检中心A区"}}}),
        )
        .await;
    let written = recall(&client, "test_004", "appointment", false).await;
    assert_eq!(
        written["target_value"],
        json!({"time": "2024-06-16T09:00:00Z", "location": "体检中心A区"}),
        "{written}"
    );
}

//! The HTTP gateway of real `engram-node` processes, started by the harness: the README
//! walk-through, durability of acknowledged writes across SIGKILL, clean shutdown with writes
//! in flight, per-route metrics, search by meaning across a SIGKILL (the index rebuilt from
//! stored embeddings). Several nodes on one file are `cluster.rs`'s.
//!
//! Each test starts its own node in its own sandbox. Loads are bounded in count and time.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_tests::harness::{HttpClient, HttpError, Sandbox, turn};
use engram_tests::history::{Call, History, Outcome as Ended};
use hyper::StatusCode;
use serde_json::{Value, json};

/// A write the node answered 200: what must be found after a crash.
#[derive(Debug, Clone)]
struct Ack {
    user: String,
    body: Value,
    seq: u64,
}

/// The `user_text` of each turn, keyed by it, with the seqs it was stored under.
async fn stored_turns(client: &HttpClient, user: &str, session: &str) -> HashMap<String, Vec<u64>> {
    let mut stored: HashMap<String, Vec<u64>> = HashMap::new();
    for t in client.must_session_turns(user, session).await {
        let text = t["user_text"].as_str().expect("user_text").to_owned();
        stored
            .entry(text)
            .or_default()
            .push(t["seq"].as_u64().expect("seq"));
    }
    stored
}

fn text_of(body: &Value) -> String {
    body["user_text"].as_str().expect("user_text").to_owned()
}

/// Waits until `done()` holds, polling, or panics with `what` at the deadline.
async fn eventually(what: &str, timeout: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_walkthrough_an_elliptical_follow_up_gets_the_first_turns_conditions() {
    let node = Sandbox::new().node("walkthrough").start().await;
    let http = node.client();
    let first = turn(
        "walk-1",
        "s1",
        "Show the GMV of East China in October from dw_orders, by week",
        "GMV of East China in October (dw_orders): 4 weekly rows, 12.8M in total.",
    );
    let ack = http.must_append_turn("alice", &first).await;
    assert_eq!(
        (ack["written"].as_bool(), ack["seq"].as_u64()),
        (Some(true), Some(0)),
        "{ack}"
    );
    assert!(
        ack["entities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "dw_orders"),
        "{ack}"
    );

    // Before the LLM sees "what about their total amount?", the gateway asks for the context:
    // it must carry the region, the month and the table the question leaves out.
    let ctx = http
        .must_context("alice", "s1", "what about their total amount?")
        .await;
    let text = ctx["text"].as_str().unwrap();
    for condition in ["East China", "October", "dw_orders"] {
        assert!(
            text.contains(condition),
            "the context lacks {condition:?}:\n{text}"
        );
    }
    assert_eq!(ctx["recent_turns"].as_array().unwrap().len(), 1, "{ctx}");
    assert!(
        ctx["entities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "dw_orders"),
        "{ctx}"
    );
    assert!(
        ctx["tokens"].as_u64().unwrap() <= ctx["token_budget"].as_u64().unwrap(),
        "{ctx}"
    );

    let second = turn(
        "walk-2",
        "s1",
        "what about their total amount?",
        "The total amount of East China orders in October (dw_orders) is 15.2M.",
    );
    assert_eq!(
        http.must_append_turn("alice", &second).await["seq"].as_u64(),
        Some(1)
    );
    let ctx = http.must_context("alice", "s1", "and in November?").await;
    let recent: Vec<_> = ctx["recent_turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(recent, [0, 1], "both turns, oldest first: {ctx}");

    // Another user's context knows nothing of alice's conversation.
    let other = http
        .must_context("bob", "s1", "what about their total amount?")
        .await;
    assert!(
        !other["text"].as_str().unwrap().contains("East China"),
        "{other}"
    );
    // A retry of the first turn replays its outcome instead of writing it again.
    let again = http.must_append_turn("alice", &first).await;
    assert_eq!(
        (again["replayed"].as_bool(), again["seq"].as_u64()),
        (Some(true), Some(0)),
        "{again}"
    );
    assert_eq!(http.must_session_turns("alice", "s1").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_acknowledged_turn_and_retries_replay_them() {
    const USERS: usize = 6;
    const CLIENTS: usize = 12;
    const PER_CLIENT: usize = 120; // at most 240 turns a user: under the 500 one GET returns
    const KILL_AFTER: usize = 80;

    let mut node = Sandbox::new().node("sigkill").start().await;
    let http = node.client();
    // Two clients write each user at once: the history checks that appends acknowledged one
    // after the other are stored in that order, whatever the SIGKILL.
    let history = Arc::new(History::new());
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let in_doubt = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
    let running = Arc::new(AtomicUsize::new(CLIENTS));
    let killed = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, acks, in_doubt, running, killed, history) = (
            http.clone(),
            acks.clone(),
            in_doubt.clone(),
            running.clone(),
            killed.clone(),
            history.clone(),
        );
        clients.push(tokio::spawn(async move {
            let user = format!("load-{}", c % USERS);
            for i in 0..PER_CLIENT {
                let id = format!("kill-{c}-{i}");
                let body = turn(&id, "s1", &format!("turn {id} of {user}"), "ok");
                let op = history.invoke(c, &user, Call::Append(text_of(&body)));
                // A 503 `not_owner` (a busy machine: leases not confirmed in time) asks for a
                // retry, which a gateway sends with the same request id.
                let outcome = http.append_turn_retrying(&user, &body).await;
                match outcome {
                    Ok(reply) if reply.status == StatusCode::OK => {
                        history.tried(op, 0, 200);
                        history.complete(op, Ended::Ok(None));
                        let seq = reply.json()["seq"]
                            .as_u64()
                            .expect("an acknowledged turn has a seq");
                        acks.lock().unwrap().push(Ack {
                            user: user.clone(),
                            body,
                            seq,
                        });
                    }
                    outcome => {
                        assert!(
                            killed.load(Ordering::SeqCst),
                            "{id} failed while the node was up: {outcome:?}"
                        );
                        // No answer: the turn may or may not have been written.
                        history.complete(op, Ended::Unknown);
                        in_doubt.lock().unwrap().push((user.clone(), body));
                        break;
                    }
                }
            }
            running.fetch_sub(1, Ordering::SeqCst);
        }));
    }
    eventually("acknowledged turns", Duration::from_secs(60), || {
        acks.lock().unwrap().len() >= KILL_AFTER
    })
    .await;
    killed.store(true, Ordering::SeqCst);
    let busy_at_kill = running.load(Ordering::SeqCst);
    node.kill();
    for client in clients {
        client.await.unwrap();
    }
    assert!(busy_at_kill > 0, "the load had finished before the kill");
    let acks = acks.lock().unwrap().clone();
    let in_doubt = in_doubt.lock().unwrap().clone();
    eprintln!(
        "{} acknowledged, {} in doubt, {busy_at_kill} clients busy at the kill",
        acks.len(),
        in_doubt.len()
    );

    node.restart().await;
    let http = node.client();
    let mut stored = HashMap::new();
    for u in 0..USERS {
        let user = format!("load-{u}");
        stored.insert(user.clone(), stored_turns(&http, &user, "s1").await);
    }
    // Each user's list, by sequence number, as the history's final state.
    let finals: HashMap<String, Vec<String>> = stored
        .iter()
        .map(|(user, turns)| {
            let mut by_seq: Vec<(u64, String)> = turns
                .iter()
                .flat_map(|(text, seqs)| seqs.iter().map(move |s| (*s, text.clone())))
                .collect();
            by_seq.sort();
            (user.clone(), by_seq.into_iter().map(|(_, t)| t).collect())
        })
        .collect();
    let report = history.check(&finals, &[]);
    eprintln!("history: {}", report.summary());
    report.assert_clean();
    for (user, turns) in &stored {
        for (text, seqs) in turns {
            assert_eq!(
                seqs.len(),
                1,
                "{user}: {text:?} stored {} times",
                seqs.len()
            );
        }
    }
    for ack in &acks {
        let seqs = stored[&ack.user].get(&text_of(&ack.body));
        assert_eq!(
            seqs,
            Some(&vec![ack.seq]),
            "{}: acknowledged {ack:?}, stored {seqs:?}",
            ack.user
        );
    }
    // Retrying an acknowledged request replays it: same seq, nothing written again.
    for ack in &acks {
        let again = http.must_append_turn(&ack.user, &ack.body).await;
        assert_eq!(
            (again["replayed"].as_bool(), again["seq"].as_u64()),
            (Some(true), Some(ack.seq)),
            "{ack:?}: {again}"
        );
    }
    // Retrying a request that got no answer lands it exactly once, whether or not the
    // first attempt was written (if it was, the retry is a replay of the same seq).
    for (user, body) in &in_doubt {
        let first = stored[user].get(&text_of(body)).cloned();
        let retry = http.must_append_turn(user, body).await;
        let replayed = retry["replayed"].as_bool() == Some(true);
        assert_eq!(
            replayed,
            first.is_some(),
            "{body}: stored before the retry as {first:?}, retry {retry}"
        );
        if let Some(seqs) = first {
            assert_eq!(retry["seq"].as_u64(), Some(seqs[0]), "{retry}");
        }
    }
    for u in 0..USERS {
        let user = format!("load-{u}");
        let after = stored_turns(&http, &user, "s1").await;
        let expected = acks.iter().filter(|a| a.user == user).count()
            + in_doubt.iter().filter(|(u, _)| *u == user).count();
        assert_eq!(
            after.len(),
            expected,
            "{user}: one turn per acknowledged or retried request"
        );
        assert!(
            after.values().all(|seqs| seqs.len() == 1),
            "{user}: a turn stored twice"
        );
    }
}

/// What became of one request sent around the SIGTERM.
#[derive(Debug)]
struct Outcome {
    user: String,
    body: Value,
    result: Result<StatusCode, HttpError>,
    answered_at: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_writes_in_flight_finishes_them_or_refuses_them_and_half_writes_none() {
    const USERS: usize = 3;
    const PER_USER: usize = 30;

    let mut node = Sandbox::new().node("sigterm").start().await;
    // A fresh connection per request: an idle keep-alive connection closed by the shutting-
    // down server would blur "never reached the node" with "no answer".
    let http = node.fresh_client();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Outcome>();
    let send = |wave: &str, n: usize| {
        for i in 0..n {
            let (http, tx) = (http.clone(), tx.clone());
            let user = format!("term-{}", i % USERS);
            let id = format!("{wave}-{i}");
            tokio::spawn(async move {
                let body = turn(&id, "s1", &format!("turn {id} of {user}"), "ok");
                // A 503 `not_owner` (a busy machine: leases not confirmed in time) is retried
                // with the same request id, as a gateway does; after SIGTERM the retry is
                // refused or answered like any other request.
                let result = http
                    .append_turn_retrying(&user, &body)
                    .await
                    .map(|r| r.status);
                let _ = tx.send(Outcome {
                    user,
                    body,
                    result,
                    answered_at: Instant::now(),
                });
            });
        }
    };
    // Each user's writes queue at its actor (one fsync each), so most of the first wave is
    // still in flight when its first answer arrives; that is when SIGTERM goes.
    send("before", USERS * PER_USER);
    let first = rx.recv().await.unwrap();
    node.signal("TERM");
    let signalled = Instant::now();
    send("after", USERS * 4);
    drop(tx);
    let status = node.wait_exit(Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status}");
    let mut outcomes = vec![first];
    while let Some(outcome) = rx.recv().await {
        outcomes.push(outcome);
    }
    assert_eq!(outcomes.len(), USERS * PER_USER + USERS * 4);

    let mut tally = BTreeMap::new();
    for o in &outcomes {
        let kind = match &o.result {
            Ok(status) => format!("{status}"),
            Err(HttpError::Connect(_)) => "refused".to_owned(),
            Err(HttpError::Transport(_)) => "no answer".to_owned(),
            Err(HttpError::Timeout) => "timeout".to_owned(),
        };
        *tally.entry(kind).or_insert(0) += 1;
        assert!(
            matches!(o.result, Ok(StatusCode::OK) | Err(_)),
            "an answer other than 200: {o:?}"
        );
        assert!(
            !matches!(o.result, Err(HttpError::Timeout)),
            "a request hung through the shutdown: {o:?}"
        );
    }
    let finished_after_signal = outcomes
        .iter()
        .filter(|o| o.result.is_ok() && o.answered_at > signalled)
        .count();
    eprintln!("outcomes {tally:?}; {finished_after_signal} answered 200 after SIGTERM");
    assert!(
        finished_after_signal > 0,
        "no write was in flight at SIGTERM: {tally:?}"
    );

    node.restart().await;
    let http = node.client();
    let mut stored = HashMap::new();
    for u in 0..USERS {
        let user = format!("term-{u}");
        stored.insert(user.clone(), stored_turns(&http, &user, "s1").await);
    }
    for o in &outcomes {
        let found = stored[&o.user].get(&text_of(&o.body)).map_or(0, Vec::len);
        match &o.result {
            Ok(_) => assert_eq!(found, 1, "answered 200 but stored {found} times: {o:?}"),
            Err(_) => assert!(found <= 1, "stored {found} times: {o:?}"),
        }
        // Whatever happened, a retry settles it: a replay if it was written, else a write.
        let retry = http.must_append_turn(&o.user, &o.body).await;
        assert_eq!(
            retry["replayed"].as_bool(),
            Some(found == 1),
            "{o:?}: {retry}"
        );
    }
}

/// `name{labels} value` lines of a Prometheus text exposition, labels parsed.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split("\",")
                .filter_map(|pair| pair.split_once("=\""))
                .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

fn count(samples: &[(BTreeMap<String, String>, f64)], labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(l, _)| {
            labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_per_route_and_status_without_user_ids() {
    let node = Sandbox::new().node("metrics").start().await;
    let http = node.client();
    let user = "metrics-user-7f3a";
    for i in 0..3 {
        http.must_append_turn(
            user,
            &turn(&format!("m-{i}"), "s1", "Show GMV of East China", "ok"),
        )
        .await;
    }
    http.must_context(user, "s1", "and in October?").await;
    http.must_session_turns(user, "s1").await;
    let bad = http
        .append_turn(user, &json!({ "request_id": "m-bad" }))
        .await
        .unwrap();
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let unknown = http
        .get(&format!("/v1/users/{user}/nothing-here"))
        .await
        .unwrap();
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    let text = http.must_metrics().await;
    let requests = samples(&text, "engram_http_requests_total");
    let turns = "/v1/users/{user}/turns";
    let expectations = [
        ("POST", turns, "200", 3.0),
        ("POST", turns, "400", 1.0),
        ("POST", "/v1/users/{user}/context", "200", 1.0),
        (
            "GET",
            "/v1/users/{user}/sessions/{session_id}/memory",
            "200",
            1.0,
        ),
    ];
    for (method, route, status, n) in expectations {
        let got = count(
            &requests,
            &[("method", method), ("route", route), ("status", status)],
        );
        assert_eq!(got, n, "{method} {route} {status}:\n{text}");
    }
    assert_eq!(
        count(&requests, &[("status", "404")]),
        1.0,
        "the unknown path is counted:\n{text}"
    );
    assert!(
        count(&requests, &[("route", "/ready")]) >= 1.0,
        "the harness's readiness probes:\n{text}"
    );
    let latency = samples(&text, "engram_http_request_seconds_count");
    assert_eq!(
        count(&latency, &[("method", "POST"), ("route", turns)]),
        4.0,
        "{text}"
    );
    assert!(
        !text.contains(user),
        "a user id leaked into the metrics:\n{text}"
    );
    assert!(text.contains("engram_storage_commits_total"), "{text}");
    // SQLite's WAL and its checkpoint thread.
    for name in [
        "engram_sqlite_write_queue gauge",
        "engram_sqlite_checkpoints_total counter",
        "engram_sqlite_wal_pages gauge",
    ] {
        assert!(text.contains(&format!("# TYPE {name}")), "{name}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_memories_by_meaning_before_and_after_a_sigkill() {
    // About meaning, not latency: a query waits for its embedding however busy the machine is
    // (the deadline's fallback is tested in actors/tests/pipeline.rs).
    let mut node = Sandbox::new()
        .node("search")
        .set("inference.query-deadline", "60s")
        // It waits for the pipeline, which the idle class would starve on a loaded machine.
        .set("inference.background-priority", "normal")
        // The reranker loads at the first rerank: about meaning too, not latency.
        .set("reranker.deadline", "60s")
        .start()
        .await;
    let http = node.client();
    let user = "dana";
    let turns = [
        "We adopted a golden retriever puppy and named him Oscar",
        "Show the quarterly GMV of East China",
        "我上周末去爬山了",
    ];
    for (i, text) in turns.iter().enumerate() {
        http.must_append_turn(user, &turn(&format!("q-{i}"), "s1", text, "ok"))
            .await;
    }
    // The vectors follow the writes: wait for them.
    http.must_drain_pipeline().await;
    let search = |mode: &'static str| json!({ "query": "what is my dog called?", "k": 2, "mode": mode, "kinds": ["episodic"] });
    let path = format!("/v1/users/{user}/memories/search");
    let before = http.must_post(&path, &search("dense")).await;
    assert_eq!(before["embedded"], true, "{before}");
    assert_eq!(before["hits"][0]["memory"]["turn_id"], 0, "{before}");
    // Across languages: a Chinese question finds the Chinese turn, an English one its twin.
    let hiking = http
        .must_post(
            &path,
            &json!({ "query": "did I go hiking recently?", "k": 1, "mode": "dense" }),
        )
        .await;
    assert_eq!(hiking["hits"][0]["memory"]["turn_id"], 2, "{hiking}");
    let bad = http
        .post(&path, &json!({ "query": "dog", "mode": "telepathy" }))
        .await
        .unwrap();
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.text().contains("mode"), "{}", bad.text());

    let metrics = http.must_metrics().await;
    let texts: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("engram_embedding_texts_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(texts >= 5.0, "turns and queries were embedded:\n{metrics}");
    assert!(
        metrics.contains("engram_embedding_batch_size_bucket"),
        "{metrics}"
    );

    node.kill();
    node.restart().await;
    let after = node.client().must_post(&path, &search("hybrid")).await;
    assert_eq!(
        after["hits"][0]["memory"]["turn_id"], 0,
        "the restarted node rebuilt the index from storage: {after}"
    );

    // Reranked by the English cross-encoder, which a Chinese question does not go to.
    let mut reranked = search("hybrid");
    reranked["rerank"] = json!(true);
    let reranked = node.client().must_post(&path, &reranked).await;
    assert_eq!(reranked["reranked"], true, "{reranked}");
    assert!(reranked.get("rerank_fallback").is_none(), "{reranked}");
    assert_eq!(reranked["hits"][0]["memory"]["turn_id"], 0, "{reranked}");
    let chinese = node
        .client()
        .must_post(
            &path,
            &json!({ "query": "我的狗叫什么名字？", "rerank": true }),
        )
        .await;
    assert_eq!(chinese["reranked"], false, "{chinese}");
    assert_eq!(chinese["rerank_fallback"], "not-english", "{chinese}");
    let metrics = node.client().must_metrics().await;
    assert!(
        metrics.contains("engram_rerank_searches_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("engram_rerank_fallbacks_total{reason=\"not-english\"} 1\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_start_fails_the_test_with_the_reason_from_its_log() {
    let spec = Sandbox::new().node("invalid").set("memory.token-budget", 5);
    let failed = tokio::spawn(async move { spec.start().await })
        .await
        .unwrap_err();
    let panic = failed.into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("node invalid did not start"), "{message}");
    assert!(
        message.contains("memory.token-budget"),
        "the node's own explanation: {message}"
    );
}

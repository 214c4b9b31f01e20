//! The limits on what a gateway key can learn of a user's personal data, through a real node
//! with master keys:
//! - masks keep at most the last 4 characters, and mobile numbers are masked too;
//! - `anchors/match` is counted per (key, user): a brute force of the hidden digits of a
//!   masked ID number is stopped at `security.anchor-match-limit`, and the right number is
//!   never confirmed past it;
//! - the breaker counts per (key, user): one gateway at its limit does not lock another out;
//!   contexts serving high-PII turns count as sensitive reads (past the limit they come back
//!   without them); an admin's approval clears the counts of every key;
//! - end to end: the sixth read of a user's high-PII memories in the window is refused until
//!   an admin approves; admins read full text, gateways masked text; identity anchors match
//!   the numbers a user gave; and all of it is in the audit trail;
//! - numbers written in groups, with non-breaking spaces or zero-width characters, and cut
//!   (a 2,000-character cap, a summary) reach a gateway through no read with more than their
//!   last 4 characters: turns, summaries, session titles, memories, searches, contexts and
//!   `/recall` (numbers and keys of intent fields too);
//! - no search is an oracle: a right guess of a masked number and a wrong one with the same
//!   last 4 get the same answer, in every mode, and every guess counts like an anchor match,
//!   found or not.

use engram_tests::harness::{HttpClient, Node, Sandbox, turn};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

const ID: &str = "11010519491231002X";
const MOBILE: &str = "13812345678";

/// Clients of two gateway keys (`x`, `y`) and one admin key of tenant `acme`.
async fn clients(node: &Node) -> [HttpClient; 3] {
    let mut made = Vec::new();
    for (scope, name) in [("gateway", "x"), ("gateway", "y"), ("admin", "a")] {
        let (token, _) = node.must_make_key("acme", scope, name).await;
        made.push(node.client().with_key(&token));
    }
    made.try_into()
        .unwrap_or_else(|_| unreachable!("three keys were made"))
}

async fn keyed_node(name: &str, settings: &[(&str, u32)]) -> (Sandbox, Node) {
    let sandbox = Sandbox::new();
    let keys = sandbox.path().join("master.keys");
    engram_tests::harness::write_secret(&keys, &format!("1 {}\n", "3c".repeat(32)));
    let mut spec = sandbox.node(name).set(
        "security.master-key-file",
        keys.to_string_lossy().into_owned(),
    );
    for (setting, value) in settings {
        spec = spec.set(setting, *value);
    }
    let node = spec.start().await;
    (sandbox, node)
}

/// A resident ID number with the region and birth date of [`ID`], sequence `seq` and the
/// right check character: what someone guessing the hidden digits would try.
fn candidate(seq: u32) -> String {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    let body = format!("{}{seq:03}", &ID[..14]);
    let sum: u32 = body
        .bytes()
        .zip(WEIGHTS)
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    let check = char::from(b"10X98765432"[(sum % 11) as usize]);
    format!("{body}{check}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masks_keep_four_characters_and_a_brute_force_of_the_rest_is_stopped() {
    let (_sandbox, node) = keyed_node("brute", &[]).await;
    let [x, y, admin] = clients(&node).await;
    x.must_append_turn(
        "erin",
        &turn(
            "t1",
            "s1",
            &format!("我的身份证号是{ID}，手机{MOBILE}"),
            "noted",
        ),
    )
    .await;
    let turns = x
        .must_get("/v1/users/erin/sessions/s1/memory")
        .await
        .to_string();
    assert!(turns.contains("**************002X"), "{turns}");
    assert!(
        !turns.contains("11010519") && !turns.contains(MOBILE),
        "{turns}"
    );
    assert!(turns.contains("*******5678"), "{turns}");

    // The guesser knows the last 4 (`002X`) and, say, region and birth date: the sequence
    // digits are left. Ten wrong guesses are answered, then nothing more.
    assert_eq!(candidate(2), ID);
    let limit = 10;
    let mut guesses = (0..1000).filter(|seq| *seq != 2).map(candidate);
    for guess in guesses.by_ref().take(limit) {
        let reply = x
            .must_post("/v1/users/erin/anchors/match", &json!({ "value": guess }))
            .await;
        assert_eq!(reply["matched"], false, "{guess}: {reply}");
    }
    let refused = x
        .post("/v1/users/erin/anchors/match", &json!({ "value": ID }))
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text());
    assert_eq!(refused.json()["code"], "approval_required");
    assert!(refused.json()["matched"].is_null(), "{}", refused.text());
    // A malformed value is not counted, and still gets its 400.
    let malformed = x
        .post("/v1/users/erin/anchors/match", &json!({ "value": "hello" }))
        .await
        .unwrap();
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);

    // Another gateway is not locked out by X's guesses.
    let other = y
        .must_post("/v1/users/erin/anchors/match", &json!({ "value": ID }))
        .await;
    assert_eq!(other["matched"], true, "{other}");
    // An approval clears X's count.
    let approval = admin
        .must_post("/v1/admin/users/erin/approvals", &json!({}))
        .await;
    assert!(approval["cleared"].as_u64().unwrap() >= 11, "{approval}");
    let again = x
        .must_post("/v1/users/erin/anchors/match", &json!({ "value": ID }))
        .await;
    assert_eq!(again["matched"], true, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_count_as_sensitive_reads_per_key_and_one_gateway_does_not_lock_out_another() {
    let (_sandbox, node) = keyed_node("per-key", &[("security.sensitive-read-limit", 3)]).await;
    let [x, y, admin] = clients(&node).await;
    x.must_append_turn(
        "frank",
        &turn("t1", "s1", &format!("my ID is {ID}"), "noted"),
    )
    .await;
    x.must_append_turn("frank", &turn("t2", "s1", "show GMV by region", "ok"))
        .await;
    for i in 0..3 {
        let ctx = x.must_context("frank", "s1", "GMV").await.to_string();
        assert!(ctx.contains("**************002X"), "context {i}: {ctx}");
    }
    // X has used its 3 sensitive reads on contexts: session reads are refused, and a context
    // comes back without the high-PII turn.
    let list = x.get("/v1/users/frank/sessions/s1/memory").await.unwrap();
    assert_eq!(list.status, StatusCode::FORBIDDEN, "{}", list.text());
    assert_eq!(list.json()["code"], "approval_required");
    let ctx = x.must_context("frank", "s1", "GMV").await;
    let text = ctx.to_string();
    assert!(!text.contains("002X"), "{text}");
    assert!(text.contains("withheld"), "{text}");
    assert!(
        text.contains("show GMV by region"),
        "the other turn stays: {text}"
    );

    // Y is not locked out by X.
    let list = y.get("/v1/users/frank/sessions/s1/memory").await.unwrap();
    assert_eq!(list.status, StatusCode::OK, "{}", list.text());
    let ctx = y.must_context("frank", "s1", "GMV").await.to_string();
    assert!(ctx.contains("**************002X"), "{ctx}");

    // The approval clears every key's count.
    let approval = admin
        .must_post("/v1/admin/users/frank/approvals", &json!({}))
        .await;
    assert_eq!(approval["cleared"], 5, "3 by X, 2 by Y: {approval}");
    let list = x.get("/v1/users/frank/sessions/s1/memory").await.unwrap();
    assert_eq!(list.status, StatusCode::OK, "{}", list.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anchors_match_sensitive_reads_trip_the_breaker_admins_approve_and_all_is_audited() {
    let (_sandbox, node) = keyed_node("breaker", &[]).await;
    let (gateway, gateway_id) = node.must_make_key("acme", "gateway", "acme-gateway").await;
    let (admin, admin_id) = node.must_make_key("acme", "admin", "acme-admin").await;
    let g = node.client().with_key(&gateway);
    let adm = node.client().with_key(&admin);
    // Identity anchors: the number is matched, never stored or returned.
    let matched = g
        .must_post("/v1/users/carol/anchors/match", &json!({"value": ID}))
        .await;
    assert_eq!(
        (matched["matched"].as_bool(), matched["keyed"].as_bool()),
        (Some(false), Some(true))
    );
    g.must_create_memory(
        "carol",
        &json!({"request_id": "m1", "kind": "profile", "text": format!("my ID is {ID}"),
                "status": "active"}),
    )
    .await;
    let matched = g
        .must_post(
            "/v1/users/carol/anchors/match",
            &json!({"value": ID.to_lowercase()}),
        )
        .await;
    assert_eq!(matched["matched"], true, "{matched}");
    assert_eq!(matched["kind"], "resident-id");
    let other = g
        .must_post(
            "/v1/users/carol/anchors/match",
            &json!({"value": "110105198001010032"}),
        )
        .await;
    assert_eq!(other["matched"], false);
    // Gateways read masked text; admins read it in full and are not limited.
    let masked = g.must_get("/v1/users/carol/memories").await.to_string();
    assert!(
        !masked.contains(ID) && masked.contains("**************002X"),
        "{masked}"
    );
    let full = adm.must_get("/v1/users/carol/memories").await.to_string();
    assert!(full.contains(ID), "an admin reads the full text");
    for _ in 0..4 {
        g.must_get("/v1/users/carol/memories").await;
    }
    let refused = g.get("/v1/users/carol/memories").await.unwrap();
    assert_eq!(
        refused.status,
        StatusCode::FORBIDDEN,
        "the sixth sensitive read"
    );
    assert_eq!(refused.json()["code"], "approval_required");
    // Reads that return no sensitive memory are not limited.
    g.must_get("/v1/users/dave/memories").await;
    let approval = adm
        .must_post("/v1/admin/users/carol/approvals", &json!({}))
        .await;
    // The first match came before carol had any data: nothing to protect, not counted.
    assert_eq!(approval["cleared"], 7, "5 reads and 2 anchor matches");
    g.must_get("/v1/users/carol/memories").await;

    // The audit trail: by user, by principal, with client addresses and outcomes.
    let by_user = adm.must_get("/v1/admin/audit?user=carol").await;
    let entries = by_user["entries"].as_array().unwrap();
    let actions: Vec<(&str, &str, u64)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["principal"].as_str().unwrap(),
                e["outcome"].as_u64().unwrap(),
            )
        })
        .collect();
    let g_id = gateway_id.as_str();
    let a_id = admin_id.as_str();
    assert_eq!(actions[0], ("anchor.match", g_id, 200));
    assert!(actions.contains(&("memory.write", g_id, 200)));
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == &("memory.list", g_id, 200))
            .count(),
        6
    );
    assert!(
        actions.contains(&("memory.list", g_id, 403)),
        "the refused read"
    );
    assert!(actions.contains(&("memory.list", a_id, 200)));
    assert!(actions.contains(&("breaker.approve", a_id, 200)));
    assert!(entries.iter().all(|e| {
        e["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:"))
    }));
    assert!(
        !by_user.to_string().contains("carol"),
        "users are named by pseudonym, never by id"
    );
    let by_principal = adm
        .must_get(&format!("/v1/admin/audit?principal={a_id}"))
        .await;
    assert!(
        by_principal["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["principal"] == a_id)
    );
    // Forgetting is audited; key operations too.
    adm.must(Method::DELETE, "/v1/users/carol", None).await;
    let after = adm.must_get("/v1/admin/audit?user=carol").await;
    assert_eq!(
        after["entries"].as_array().unwrap().last().unwrap()["action"],
        "user.forget"
    );
    let root = node.client().with_key(node.spec().keys().root());
    let root_view = root
        .with_header("x-engram-tenant", "acme")
        .must_get("/v1/admin/audit?principal=root")
        .await;
    let made = format!("new_key_id={gateway_id}");
    assert!(
        root_view["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "key.create" && e["ids"][0] == made.as_str()),
        "the made key's id is in its audit entry: {root_view}"
    );
    // A window of time: nothing before the node started.
    let none = adm.must_get("/v1/admin/audit?from=0&to=1000").await;
    assert!(none["entries"].as_array().unwrap().is_empty());
}

/// Identifiers as people write them, and what of each must never reach a gateway: the
/// leading characters, as written and compact.
const WRITTEN: [(&str, [&str; 2]); 7] = [
    ("138-1234-5678", ["138-1234", "1381234"]),
    ("139 8765 4321", ["139 8765", "1398765"]),
    ("137.1111.2222", ["137.1111", "1371111"]),
    ("110105 19491231 002X", ["110105", "19491231"]),
    ("320311770706001", ["320311", "770706"]),
    (
        "6222\u{A0}0202\u{A0}0011\u{A0}2233\u{A0}446",
        ["6222\u{A0}0202", "622202"],
    ),
    (
        "136\u{200B}5555\u{200B}6666",
        ["136\u{200B}5555", "1365555"],
    ),
];

/// Panics if `answer` holds more of any of [`WRITTEN`] than its last 4 characters.
fn assert_masked(what: &str, answer: &Value) {
    let text = answer.to_string();
    for (written, heads) in WRITTEN {
        for head in heads {
            assert!(
                !text.contains(head),
                "{what} shows {head:?} of {written:?}: {text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_split_and_cut_numbers_reach_no_gateway_read_beyond_their_last_four() {
    let (_sandbox, node) = keyed_node("grouped", &[("security.sensitive-read-limit", 0)]).await;
    let [x, _, admin] = clients(&node).await;
    let user = "hana";
    let [mobile, spaced, dotted, id, old_id, card, split] = WRITTEN.map(|(w, _)| w);
    // The ID number straddles the assistant text's 2,000-character cap.
    let long_answer = format!("{}身份证{id}", "好".repeat(1_990));
    let turns = [
        format!("我的手机{mobile}，身份证{id}"),
        format!("请帮我查询一下上个月所有的消费记录和账单明细，卡号是{card}"),
        format!("旧身份证{old_id}，备用号码{spaced}，还有{dotted}"),
        format!("联系{split}"),
    ];
    for (i, text) in turns.iter().enumerate() {
        let answer = if i == 3 {
            long_answer.as_str()
        } else {
            "好的"
        };
        x.must_append_turn(user, &turn(&format!("g{i}"), "s1", text, answer))
            .await;
    }
    // Newer turns push those four out of the raw window: contexts show them summarised.
    for i in 4..11 {
        x.must_append_turn(
            user,
            &turn(
                &format!("g{i}"),
                "s1",
                &format!("show GMV by region {i}"),
                "ok",
            ),
        )
        .await;
    }
    x.must_post(
        "/write",
        &json!({ "user_id": user, "request_id": "w1", "intent_type": "appointment",
                 "fields": { "target": "dentist", "phone": 13_812_345_678_u64,
                             "contact": { "13987654321": "mum", "card": [card] } } }),
    )
    .await;

    let mut answers = vec![
        (
            "session turns",
            x.must_get(&format!("/v1/users/{user}/sessions/s1/memory?limit=500"))
                .await,
        ),
        (
            "session titles",
            x.must_get(&format!("/v1/users/{user}/sessions")).await,
        ),
        (
            "memories",
            x.must_get(&format!("/v1/users/{user}/memories")).await,
        ),
        (
            "recall",
            x.must_get(&format!(
                "/recall?user_id={user}&intent_type=appointment&all=true"
            ))
            .await,
        ),
        (
            "context of the session",
            x.must_context(user, "s1", "账单").await,
        ),
        (
            "context of another session",
            x.must_context(user, "s2", "账单 身份证 手机").await,
        ),
    ];
    for path in [
        format!("/chat/sessions?user_id={user}"),
        format!("/chat/sessions/s1/memory?user_id={user}&limit=500"),
    ] {
        answers.push(("seed endpoint", x.must_get(&path).await));
    }
    answers.push((
        "prewarm",
        x.must_post(&format!("/v1/users/{user}/prewarm"), &json!({}))
            .await,
    ));
    for mode in ["bm25", "dense", "hybrid"] {
        let found = x
            .must_post(
                &format!("/v1/users/{user}/memories/search"),
                &json!({ "query": "账单 身份证 手机 卡号 联系 好", "mode": mode, "k": 50 }),
            )
            .await;
        answers.push(("search", found));
    }
    for (what, answer) in &answers {
        assert_masked(what, answer);
    }
    let recall = &answers[3].1;
    assert_eq!(
        recall["intents"][0]["fields"]["phone"], "*******5678",
        "{recall}"
    );
    assert!(
        recall.to_string().contains("\"*******4321\":\"mum\""),
        "an object key is masked: {recall}"
    );
    let turns = answers[0].1.to_string();
    assert!(
        turns.contains("*******5678"),
        "masked, last 4 shown: {turns}"
    );
    // An admin still reads the full text.
    let full = admin
        .must_get(&format!("/v1/users/{user}/sessions/s1/memory?limit=500"))
        .await
        .to_string();
    assert!(full.contains(id) && full.contains(mobile), "{full}");
    // The 2,000-character cap leaves the number it would cut out whole.
    assert!(full.contains("好身份证…\""), "{full}");
}

/// A resident ID number other than [`ID`] with the same last 4 (`002X`): another birth
/// date, the check character still `X`. What a guesser who knows the last 4 tries.
fn same_last_four(n: usize) -> String {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    (0..)
        .map(|day| {
            format!(
                "110105{}{:02}{:02}002",
                1950 + day / 300,
                1 + day / 28 % 12,
                1 + day % 28
            )
        })
        .filter(|body| {
            let sum: u32 = body
                .bytes()
                .zip(WEIGHTS)
                .map(|(b, w)| u32::from(b - b'0') * w)
                .sum();
            sum % 11 == 2 && format!("{body}X") != ID
        })
        .map(|body| format!("{body}X"))
        .nth(n)
        .unwrap_or_default()
}

/// Hits of a search as (memory id, score).
fn hits(found: &Value) -> Vec<(String, String)> {
    found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["memory"]["memory_id"].to_string(), h["score"].to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_number_gets_one_answer_right_or_wrong_and_every_guess_is_counted() {
    let (_sandbox, node) = keyed_node("oracle", &[("security.sensitive-read-limit", 0)]).await;
    let [x, y, admin] = clients(&node).await;
    let user = "ivy";
    x.must_create_memory(
        user,
        &json!({ "request_id": "m1", "kind": "profile", "status": "active",
                 "text": format!("我的手机是{MOBILE}，身份证{ID}") }),
    )
    .await;
    x.must_append_turn(user, &turn("t1", "s1", "联系电话138 1234 5678", "noted"))
        .await;
    // The vectors follow the writes: wait for them, so that every search sees the same index.
    node.client().must_drain_pipeline().await;
    let search = |client: &HttpClient, mode: &str, query: &str| {
        let body = json!({ "query": query, "mode": mode, "k": 10 });
        let client = client.clone();
        async move {
            client
                .post(&format!("/v1/users/{user}/memories/search"), &body)
                .await
                .unwrap()
        }
    };
    // A partial guess is no identifier: not counted, and nothing is indexed by those digits.
    let partial = search(&x, "bm25", "138 1234").await;
    assert_eq!(partial.status, StatusCode::OK, "{}", partial.text());
    assert_eq!(hits(&partial.json()), [], "{}", partial.text());

    // Right and wrong guesses sharing the last 4 the gateway sees get the same answer, in
    // every mode (the hybrid score moves with the clock: its hits are compared).
    let wrong_mobile = "13900005678";
    let mut guesses = 0;
    for mode in ["bm25", "dense", "hybrid"] {
        let right = search(&x, mode, MOBILE).await;
        let wrong = search(&x, mode, wrong_mobile).await;
        guesses += 2;
        assert_eq!(
            (right.status, wrong.status),
            (StatusCode::OK, StatusCode::OK)
        );
        let (right, wrong) = (hits(&right.json()), hits(&wrong.json()));
        if mode == "bm25" {
            assert!(!right.is_empty(), "found by the last 4 a gateway sees");
            assert_eq!(right, wrong, "{mode}");
        } else {
            let ids =
                |h: &[(String, String)]| h.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&right), ids(&wrong), "{mode}");
        }
    }
    // Full ID numbers: the right one and wrong ones with the same last 4, answered alike
    // until the anchor-match limit (10 by default), refused past it, right or wrong.
    let right = search(&x, "bm25", ID).await;
    guesses += 1;
    assert_eq!(right.status, StatusCode::OK);
    let right = hits(&right.json());
    let mut answered = 0;
    for n in 0..20 {
        let reply = search(&x, "bm25", &same_last_four(n)).await;
        if reply.status == StatusCode::OK {
            assert_eq!(hits(&reply.json()), right, "guess {n}");
            answered += 1;
        } else {
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text());
            assert_eq!(reply.json()["code"], "approval_required");
        }
    }
    assert_eq!(guesses + answered, 10, "every guess counted, found or not");
    let refused = search(&x, "hybrid", ID).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "the right one too");
    // A context whose question holds a guess past the limit is served, its sensitive
    // items withheld.
    let ctx = x
        .must_context(user, "s2", &format!("身份证{ID}"))
        .await
        .to_string();
    assert!(!ctx.contains("**************002X"), "{ctx}");

    // The reviewer's probe: 300 candidate mobile numbers in one search are 300 guesses.
    let many: Vec<String> = (0..300).map(|i| format!("139{i:04}{:04}", 5678)).collect();
    let probe = search(&y, "bm25", &many.join(" ")).await;
    assert_eq!(probe.status, StatusCode::FORBIDDEN, "{}", probe.text());
    assert_eq!(probe.json()["code"], "approval_required");
    // Y's searches without identifiers are not counted.
    let plain = search(&y, "bm25", "手机").await;
    assert_eq!(plain.status, StatusCode::OK);

    // Admins are not counted; their approval clears X's 10 guesses (Y's refused probe
    // counted nothing).
    let by_admin = search(&admin, "bm25", ID).await;
    assert_eq!(by_admin.status, StatusCode::OK);
    let approval = admin
        .must_post(&format!("/v1/admin/users/{user}/approvals"), &json!({}))
        .await;
    assert_eq!(approval["cleared"], 10, "{approval}");
    let again = search(&x, "bm25", ID).await;
    assert_eq!(again.status, StatusCode::OK);
}

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
//!   the numbers a user gave; and all of it is in the audit trail.

use engram_tests::harness::{HttpClient, Node, Sandbox, turn};
use hyper::{Method, StatusCode};
use serde_json::json;

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
    std::fs::write(&keys, format!("1 {}\n", "3c".repeat(32))).unwrap();
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

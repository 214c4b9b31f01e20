//! In-process tests of the seed-compatible chat answers (the seed's envelope, titles, rows of
//! messages) and of settling contradictions flagged for review, over the real actors and an
//! SQLite file.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::security_tests::trail_of;
use super::tests::{app, post, send, send_as};

fn turn(rid: &str, session: &str, user: &str, assistant: &str) -> Value {
    json!({"request_id": rid, "session_id": session, "user_text": user, "assistant_text": assistant})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_chat_endpoints_answer_the_seeds_fields_in_its_envelope_with_limit_and_deleted_counting_messages()
 {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let first = "What was the GMV of East China last month? Call me on 13812345678 when done";
    for (rid, user, assistant) in [
        ("c1", first, "GMV was 1.2 million yuan in dw_orders."),
        ("c2", "And by week?", "Weekly GMV is in the table below."),
    ] {
        let (status, body) = post(
            &app,
            "/v1/users/carol/turns",
            turn(rid, "s1", user, assistant),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    let (status, listed) = send(&app, Method::GET, "/chat/sessions?user_id=carol", None).await;
    assert_eq!(
        (status, &listed["code"]),
        (StatusCode::OK, &json!(0)),
        "{listed}"
    );
    let session = &listed["data"][0];
    assert_eq!(session["session_id"], "s1");
    assert_eq!(session["message_count"], 4, "two messages a turn");
    let title = session["title"].as_str().unwrap();
    assert!(
        title.starts_with("What was the GMV of East China"),
        "{title}"
    );
    assert!(
        title.chars().count() <= 50 && title.ends_with('…'),
        "{title}"
    );
    assert!(
        session["last_activity"].as_str().unwrap().ends_with('Z'),
        "{session}"
    );
    let (_, v1) = send(&app, Method::GET, "/v1/users/carol/sessions", None).await;
    assert_eq!(
        v1["sessions"][0]["title"].as_str(),
        Some(title),
        "the same title in /v1"
    );

    let (status, memory) = send(
        &app,
        Method::GET,
        "/chat/sessions/s1/memory?user_id=carol",
        None,
    )
    .await;
    assert_eq!(
        (status, &memory["code"]),
        (StatusCode::OK, &json!(0)),
        "{memory}"
    );
    let rows = memory["data"].as_array().unwrap();
    let roles: Vec<&str> = rows.iter().map(|r| r["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant"],
        "ascending"
    );
    assert_eq!(rows[3]["content"], "Weekly GMV is in the table below.");
    assert!(
        !rows[0]["content"].as_str().unwrap().contains("13812345678"),
        "masked"
    );
    for row in rows {
        assert!(!row["summary"].as_str().unwrap().is_empty(), "{row}");
        assert_eq!(
            (&row["user_id"], &row["session_id"]),
            (&json!("carol"), &json!("s1")),
            "{row}"
        );
        // The seed stores entities as a JSON array in a string.
        let entities: Vec<String> =
            serde_json::from_str(row["entities"].as_str().expect("a string")).unwrap();
        assert!(row["created_at"].is_string(), "{row}");
        if row["content"].as_str().unwrap().contains("dw_orders") {
            assert!(entities.contains(&"dw_orders".to_owned()), "{row}");
        }
    }
    let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "unique ids in order: {ids:?}"
    );

    // `limit` counts messages: the newest three, oldest first.
    let (_, three) = send(
        &app,
        Method::GET,
        "/chat/sessions/s1/memory?user_id=carol&limit=3",
        None,
    )
    .await;
    let three = three["data"].as_array().unwrap();
    assert_eq!(
        three
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        ids[1..],
        "{three:?}"
    );
    assert_eq!(listed["data"][0]["user_id"], "carol", "{listed}");

    // Errors, whichever layer answers them, in the same envelope with their status.
    let (status, missing) = send(
        &app,
        Method::GET,
        "/chat/sessions/nope/memory?user_id=carol",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        (&missing["code"], &missing["error"], &missing["data"]),
        (&json!(404), &json!("not_found"), &Value::Null),
        "{missing}"
    );
    let (status, bad) = send(&app, Method::GET, "/chat/sessions?user=carol", None).await;
    assert_eq!(
        (status, &bad["code"]),
        (StatusCode::BAD_REQUEST, &json!(400)),
        "{bad}"
    );
    assert!(
        bad["message"].as_str().unwrap().contains("user_id"),
        "{bad}"
    );
    let (status, anonymous) = send_as(
        &app,
        "not-a-key",
        Method::GET,
        "/chat/sessions?user_id=carol",
        None,
    )
    .await;
    assert_eq!(
        (status, &anonymous["code"]),
        (StatusCode::UNAUTHORIZED, &json!(401)),
        "{anonymous}"
    );
    let (status, v1_error) = send(
        &app,
        Method::GET,
        "/v1/users/carol/sessions/nope/memory",
        None,
    )
    .await;
    assert_eq!(
        (status, &v1_error["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found")),
        "/v1 keeps its errors"
    );

    let (status, deleted) = send(
        &app,
        Method::DELETE,
        "/chat/sessions/s1/memory?user_id=carol",
        None,
    )
    .await;
    assert_eq!(
        (status, &deleted["code"], &deleted["data"]["deleted"]),
        (StatusCode::OK, &json!(0), &json!(4)),
        "the seed counts the deleted messages: {deleted}"
    );
}

/// Three turns choosing bar charts after an explicit "I prefer line charts": the inferred
/// preference contradicts the stated one and is flagged. Returns the flag.
async fn flagged_contradiction(app: &axum::Router, user: &str) -> Value {
    let uri = format!("/v1/users/{user}/turns");
    let (status, _) = post(
        app,
        &uri,
        json!({"request_id": "pref", "user_text": "I prefer line charts"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    for i in 0..3 {
        let body = json!({"request_id": format!("bar{i}"), "user_text": "show sales", "choices": [{"topic": "chart_type", "value": "bar"}]});
        let (status, _) = post(app, &uri, body).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (_, flags) = send(
        app,
        Method::GET,
        &format!("/v1/users/{user}/conflicts"),
        None,
    )
    .await;
    let flags = flags["conflicts"].as_array().unwrap().clone();
    assert_eq!(flags.len(), 1, "{flags:?}");
    flags[0].clone()
}

async fn status_of(app: &axum::Router, user: &str, memory_id: &str) -> String {
    let (_, memories) = send(
        app,
        Method::GET,
        &format!("/v1/users/{user}/memories"),
        None,
    )
    .await;
    let found = memories["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["memory_id"] == memory_id);
    found.map_or("gone".into(), |m| m["status"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flagged_contradiction_is_settled_by_keeping_old_new_or_both_once_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    for (user, resolution, new_status, old_status) in [
        ("keep-old", "keep_old", "suppressed", "active"),
        ("keep-new", "keep_new", "active", "suppressed"),
        ("keep-both", "keep_both", "active", "active"),
    ] {
        let flag = flagged_contradiction(&app, user).await;
        let (new, old) = (
            flag["memory_id"].as_str().unwrap(),
            flag["conflicts_with"].as_str().unwrap(),
        );
        assert_eq!(
            status_of(&app, user, new).await,
            "suppressed",
            "held back until settled"
        );
        let uri = format!(
            "/v1/users/{user}/conflicts/{}/resolve",
            flag["flag_id"].as_str().unwrap()
        );
        let body = json!({"request_id": "settle", "resolution": resolution});
        let (status, settled) = post(&app, &uri, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{settled}");
        assert_eq!(
            (&settled["resolution"], &settled["replayed"]),
            (&json!(resolution), &json!(false))
        );
        assert_eq!(
            (
                status_of(&app, user, new).await,
                status_of(&app, user, old).await
            ),
            (new_status.to_owned(), old_status.to_owned()),
            "{resolution}"
        );
        let (_, flags) = send(
            &app,
            Method::GET,
            &format!("/v1/users/{user}/conflicts"),
            None,
        )
        .await;
        assert_eq!(flags["conflicts"], json!([]), "the flag is gone");
        let (status, again) = post(&app, &uri, body).await;
        assert_eq!(
            (status, &again["replayed"]),
            (StatusCode::OK, &json!(true)),
            "a retry replays"
        );
        let (status, _) = post(
            &app,
            &uri,
            json!({"request_id": "settle-2", "resolution": resolution}),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "a settled flag cannot be settled again"
        );
        let trail = trail_of(&app, user).await;
        let named = format!("flag_id={}", flag["flag_id"].as_str().unwrap());
        assert!(
            trail
                .iter()
                .any(|(action, outcome, ids)| action == "conflict.resolve"
                    && *outcome == 200
                    && ids.contains(&named)),
            "the entry names the flag: {trail:?}"
        );
    }
    let (status, bad) = post(
        &app,
        "/v1/users/keep-old/conflicts/m1/resolve",
        json!({"request_id": "x", "resolution": "keep_all"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("keep_old, keep_new, keep_both"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_clarification_in_a_turn_forms_an_episodic_memory_served_in_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let mut body = turn(
        "q1",
        "s1",
        "GMV last month?",
        "Without refunds: 1.1 million yuan.",
    );
    body["clarification"] =
        json!({"question": "GMV with or without refunds?", "answer": "without refunds"});
    let (status, ack) = post(&app, "/v1/users/dana/turns", body).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let (_, memories) = send(
        &app,
        Method::GET,
        "/v1/users/dana/memories?kind=episodic",
        None,
    )
    .await;
    let clarified: Vec<&Value> = memories["memories"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["trigger"] == "Clarification")
        .collect();
    assert_eq!(clarified.len(), 1, "{memories}");
    assert_eq!(
        (&clarified[0]["status"], &clarified[0]["text"]),
        (
            &json!("active"),
            &json!("clarified: GMV with or without refunds? → without refunds")
        )
    );
    // The turn is still in the window, so its own episodic memory is left out; the
    // clarification is knowledge of its own and is shown.
    let (_, ctx) = post(
        &app,
        "/v1/users/dana/context",
        json!({"session_id": "s1", "query": "GMV refunds", "route": "deep_analysis_workflow"}),
    )
    .await;
    assert!(
        ctx["text"]
            .as_str()
            .unwrap()
            .contains("clarified: GMV with or without refunds?"),
        "{ctx}"
    );
    let mut empty = turn("q2", "s1", "and now?", "");
    empty["clarification"] = json!({"question": "", "answer": "x"});
    let (status, bad) = post(&app, "/v1/users/dana/turns", empty).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("clarification.question"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_table_metadata_is_served_in_nl2sql_contexts_until_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let metadata = json!({"content": {"columns": {"gmv": "decimal, refunds included", "region": "text"}}, "ttl_seconds": 3600});
    let (status, stored) = send(
        &app,
        Method::PUT,
        "/v1/metadata/dw_orders",
        Some(axum::body::Body::from(metadata.to_string())),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    let ttl = stored["expires_at"].as_i64().unwrap() - stored["stored_at"].as_i64().unwrap();
    assert_eq!(ttl, 3_600_000);
    let (_, listed) = send(&app, Method::GET, "/v1/metadata", None).await;
    assert_eq!(listed["entries"][0]["name"], "dw_orders");
    post(
        &app,
        "/v1/users/erin/turns",
        turn("m1", "s1", "hello", "hi"),
    )
    .await;
    let ask = json!({"session_id": "s1", "query": "GMV by region from dw_orders", "route": "nl2sql_query"});
    let (_, ctx) = post(&app, "/v1/users/erin/context", ask.clone()).await;
    assert_eq!(ctx["tables"][0]["name"], "dw_orders", "{ctx}");
    assert!(
        ctx["text"].as_str().unwrap().contains("refunds included"),
        "{ctx}"
    );
    let (_, other) = post(
        &app,
        "/v1/users/erin/context",
        json!({"session_id": "s1", "query": "GMV by region", "route": "nl2sql_query"}),
    )
    .await;
    assert_eq!(
        other["tables"],
        json!([]),
        "a table not mentioned is not shown"
    );

    for (body, field) in [
        (json!({"content": {}, "ttl_seconds": 0}), "ttl_seconds"),
        (json!({"content": "x".repeat(20_000)}), "content"),
    ] {
        let (status, bad) = send(
            &app,
            Method::PUT,
            "/v1/metadata/dw_orders",
            Some(axum::body::Body::from(body.to_string())),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(bad["message"].as_str().unwrap().contains(field), "{bad}");
    }
    let (status, _) = send(&app, Method::DELETE, "/v1/metadata/dw_orders", None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, ctx) = post(&app, "/v1/users/erin/context", ask).await;
    assert_eq!(ctx["tables"], json!([]), "deleted");
    let (status, _) = send(&app, Method::DELETE, "/v1/metadata/dw_orders", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_digests_are_read_and_matched_by_admins_and_hold_no_text() {
    use engram_storage::data::UserData;
    use engram_storage::data::archive::RetentionRule;
    use engram_storage::sqlite::SqliteOptions;
    use engram_storage::types::{ArchiveMode, Timestamp};
    use engram_storage::{Keyspace, Store};

    use super::tests::ROOT_KEY;

    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir).await;
    let said = "Where is parcel 5512? It never arrived";
    let (status, body) = post(
        &app,
        "/v1/users/erin/turns",
        turn("a1", "s1", said, "It left the depot yesterday."),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The retention job's step, run a year on, for a tenant archiving digests.
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let ks = Keyspace::new("engram");
    let rule = RetentionRule {
        now: Timestamp(i64::MAX / 2),
        retention_ms: 30 * 86_400_000,
        archive_ms: 1826 * 86_400_000,
        mode: ArchiveMode::Digests,
    };
    let moved = store
        .run(move |txn| {
            UserData::new(txn, &ks, "default", "erin")
                .apply_retention("s1", rule, &mut { usize::MAX })
        })
        .await
        .unwrap();
    assert_eq!(moved, 1);

    let uri = "/v1/admin/users/erin/archive?kind=digests";
    let (status, page) = send_as(&app, ROOT_KEY, Method::GET, uri, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["kind"], "digests");
    let digest = &page["digests"][0];
    assert_eq!(
        (digest["session_id"].as_str(), digest["seq"].as_u64()),
        (Some("s1"), Some(0))
    );
    assert_eq!(
        digest["user_hash"].as_str().map(str::len),
        Some(64),
        "{digest}"
    );
    assert_eq!(digest["keyed"], false, "no master keys in this node");
    assert!(!page.to_string().contains("5512"), "{page}");
    let (status, _) = send(&app, Method::GET, uri, None).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a gateway key reads no archive"
    );

    let matching = |text: &str, role: &str| {
        Some(axum::body::Body::from(
            json!({"text": text, "role": role}).to_string(),
        ))
    };
    let path = "/v1/admin/users/erin/archive/match";
    let (status, found) = send_as(&app, ROOT_KEY, Method::POST, path, matching(said, "user")).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(
        found["matches"].as_array().map(Vec::len),
        Some(1),
        "{found}"
    );
    assert_eq!(found["matches"][0]["seq"], 0);
    let other = "Where is parcel 5513? It never arrived";
    let (_, none) = send_as(&app, ROOT_KEY, Method::POST, path, matching(other, "user")).await;
    assert_eq!(none["matches"].as_array().map(Vec::len), Some(0), "{none}");
    let (_, none) = send_as(
        &app,
        ROOT_KEY,
        Method::POST,
        path,
        matching(said, "assistant"),
    )
    .await;
    assert_eq!(none["matches"].as_array().map(Vec::len), Some(0), "{none}");
    let (status, bad) = send_as(&app, ROOT_KEY, Method::POST, path, matching(" ", "user")).await;
    assert_eq!(
        (status, bad["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_input")),
        "{bad}"
    );
    let (status, _) = send(&app, Method::POST, path, matching(said, "user")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let trail = trail_of(&app, "erin").await;
    assert!(
        trail
            .iter()
            .any(|(action, outcome, _)| action == "archive.match" && *outcome == 200),
        "matches are audited: {trail:?}"
    );
}

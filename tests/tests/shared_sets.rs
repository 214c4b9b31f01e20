//! The tenant's shared sets (the semantic SQL cache and the few-shot library) on real node
//! processes with the real encoder, over HTTP: the documented API end to end (scopes, bad
//! input, the review workflow, the context's shared part, YAML export and import into another
//! tenant, metrics and the audit trail), and the take-over of the tenant's actor by another
//! node after its owner is SIGKILLed, with both sets intact and searchable by meaning.
//!
//! Every wait is on a condition with a deadline, never a fixed sleep.

use std::time::{Duration, Instant};

use engram_tests::chaos::{settled, shard};
use engram_tests::harness::{HttpClient, Sandbox};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

const ORDERS: &str = "SELECT count(*) FROM sales.orders WHERE day >= current_date - 7";

fn sql_put(id: &str, question: &str) -> Value {
    json!({"request_id": id, "question": question, "route": "nl2sql", "domain": "sales",
           "sql": ORDERS})
}

fn lookup(question: &str) -> Value {
    json!({"question": question, "route": "nl2sql", "domain": "sales"})
}

async fn code(client: &HttpClient, method: Method, path: &str, body: Option<&Value>) -> u16 {
    client
        .request(method, path, body)
        .await
        .unwrap()
        .status
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_sets_over_http_serve_review_export_and_import_as_documented() {
    // Lookups wait for their question's vector however busy the machine is (a lookup past
    // the deadline only finds the same normalised question, and says so).
    let node = Sandbox::new()
        .node("shared")
        .set("inference.query-deadline", "60s")
        .start()
        .await;
    let (gateway, _) = node.must_make_key("acme", "gateway", "acme-gateway").await;
    let (admin, _) = node.must_make_key("acme", "admin", "acme-admin").await;
    let (other_admin, _) = node.must_make_key("globex", "admin", "globex-admin").await;
    let gw = node.client().with_key(&gateway);
    let adm = node.client().with_key(&admin);
    let other = node.client().with_key(&other_admin);

    // The SQL cache: a paraphrase hits, an unrelated question misses, an invalidation drops.
    let put = gw
        .must_post(
            "/v1/sql-cache",
            &sql_put("p1", "How many orders did we get last week?"),
        )
        .await;
    assert_eq!(put["tables"], json!(["sales.orders"]), "{put}");
    let hit = gw
        .must_post(
            "/v1/sql-cache/lookup",
            &lookup("how many orders did we receive last week"),
        )
        .await;
    assert_eq!(hit["hit"]["sql"], ORDERS, "{hit}");
    let similarity = hit["hit"]["similarity"].as_f64().unwrap();
    assert!((0.92..1.0).contains(&similarity), "{hit}");
    let miss = gw
        .must_post("/v1/sql-cache/lookup", &lookup("show revenue by region"))
        .await;
    assert!(miss["hit"].is_null(), "{miss}");
    let replay = gw
        .must_post(
            "/v1/sql-cache",
            &sql_put("p1", "How many orders did we get last week?"),
        )
        .await;
    assert_eq!(replay["replayed"], true, "{replay}");
    let bad = gw
        .request(Method::POST, "/v1/sql-cache/lookup", Some(&lookup("  ?? ")))
        .await
        .unwrap();
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["code"], "invalid_input", "{}", bad.text());
    assert!(bad.text().contains("question"), "{}", bad.text());
    let dropped = gw
        .must_post(
            "/v1/sql-cache/invalidate",
            &json!({"request_id": "i1", "table": "orders"}),
        )
        .await;
    assert_eq!(dropped["removed"], 1, "{dropped}");
    let gone = gw
        .must_post(
            "/v1/sql-cache/lookup",
            &lookup("How many orders did we get last week?"),
        )
        .await;
    assert!(gone["hit"].is_null(), "{gone}");

    // The few-shot library: recorded, pending, reviewed by an admin only, then served.
    let recorded = gw
        .must_post(
            "/v1/few-shot/examples",
            &json!({"request_id": "r1", "question": "Revenue by region this quarter",
                    "sql": "SELECT region, sum(amount) FROM sales GROUP BY region",
                    "route": "nl2sql", "confidence": 0.95}),
        )
        .await;
    let example = recorded["example"]["example_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(recorded["example"]["status"], "pending_review");
    let search = json!({"question": "revenue by region this quarter", "route": "nl2sql"});
    let none = gw.must_post("/v1/few-shot/search", &search).await;
    assert_eq!(none["examples"], json!([]), "pending is not served: {none}");
    let queue = "/v1/admin/few-shot/examples?status=pending_review";
    assert_eq!(code(&gw, Method::GET, queue, None).await, 403, "admin only");
    let listed = adm.must_get(queue).await;
    assert_eq!(listed["examples"][0]["example_id"], example.as_str());
    let approve = format!("/v1/admin/few-shot/examples/{example}/approve");
    let body = json!({"request_id": "a1"});
    assert_eq!(code(&gw, Method::POST, &approve, Some(&body)).await, 403);
    adm.must_post(&approve, &body).await;
    let served = gw.must_post("/v1/few-shot/search", &search).await;
    assert_eq!(
        served["examples"][0]["example"]["example_id"],
        example.as_str()
    );

    // A context asks for both at once.
    gw.must_post(
        "/v1/sql-cache",
        &sql_put("p2", "How many orders did we get last week?"),
    )
    .await;
    let context = gw
        .must_post(
            "/v1/users/alice/context",
            &json!({"query": "how many orders did we receive last week",
                    "shared": {"route": "nl2sql", "domain": "sales"}}),
        )
        .await;
    assert_eq!(context["shared"]["cached_sql"]["sql"], ORDERS, "{context}");
    assert!(context["shared"]["examples"].is_array(), "{context}");
    let no_domain = gw
        .request(
            Method::POST,
            "/v1/users/alice/context",
            Some(&json!({"query": "x", "shared": {"route": "nl2sql", "cached_sql": true}})),
        )
        .await
        .unwrap();
    assert_eq!(
        no_domain.status,
        StatusCode::BAD_REQUEST,
        "{}",
        no_domain.text()
    );

    // Export as YAML, import into another tenant, export again: the same document.
    let exported = adm.get("/v1/admin/few-shot/export").await.unwrap();
    assert_eq!(exported.status, StatusCode::OK);
    let yaml = exported.text();
    assert!(
        yaml.starts_with("examples:") && yaml.contains("revenue by region this quarter"),
        "{yaml}"
    );
    let import = other
        .request_raw(
            Method::POST,
            "/v1/admin/few-shot/import?request_id=imp1",
            "application/yaml",
            yaml.clone(),
        )
        .await
        .unwrap();
    assert_eq!(import.status, StatusCode::OK, "{}", import.text());
    assert_eq!(import.json()["created"], 1);
    let again = other.get("/v1/admin/few-shot/export").await.unwrap().text();
    assert_eq!(again, yaml, "the round trip keeps every field");
    let broken = other
        .request_raw(
            Method::POST,
            "/v1/admin/few-shot/import?request_id=imp2",
            "application/yaml",
            "examples: [ {question: 1",
        )
        .await
        .unwrap();
    assert_eq!(broken.status, StatusCode::BAD_REQUEST, "{}", broken.text());

    // Metrics count lookups by outcome; the review is in the audit trail.
    let metrics = node.client().must_metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("engram_shared_lookup_seconds_count{")
                && l.contains("set=\"sql_cache\"")
                && l.contains("outcome=\"hit\"")
                && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Both attempts: the gateway's refused, the admin's done and naming the example.
    let trail = adm.must_get("/v1/admin/audit?action=fewshot.approve").await;
    let entries = trail["entries"].as_array().unwrap();
    let outcomes: Vec<_> = entries.iter().map(|e| e["outcome"].clone()).collect();
    assert_eq!(outcomes, vec![json!(403), json!(200)], "{trail}");
    assert_eq!(entries[1]["ids"], json!([format!("example_id={example}")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_read_only_query_is_shared_between_gateways_and_promoted_by_distinct_keys() {
    let node = Sandbox::new()
        .node("shared-sql")
        .set("inference.query-deadline", "60s")
        .start()
        .await;
    let mut gateways = Vec::new();
    for name in ["gw-1", "gw-2", "gw-3"] {
        let (key, _) = node.must_make_key("acme", "gateway", name).await;
        gateways.push(node.client().with_key(&key));
    }
    let (admin, _) = node.must_make_key("acme", "admin", "acme-admin").await;
    let adm = node.client().with_key(&admin);
    let question = "How many orders did we get last week?";

    // A statement before or after a query is refused, never echoed, and never reaches
    // another gateway of the tenant.
    for (i, sql) in [
        "DROP TABLE orders; SELECT 1",
        "SELECT 1 FROM orders; DROP TABLE orders",
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"request_id": format!("bad{i}"), "question": question,
                          "route": "nl2sql", "domain": "sales", "sql": sql});
        let refused = gateways[0]
            .request(Method::POST, "/v1/sql-cache", Some(&body))
            .await
            .unwrap();
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{}",
            refused.text()
        );
        assert_eq!(
            refused.json()["code"],
            "invalid_input",
            "{}",
            refused.text()
        );
        assert!(refused.text().contains("sql"), "{}", refused.text());
        assert!(!refused.text().contains("DROP"), "{}", refused.text());
        let other = gateways[1]
            .must_post("/v1/sql-cache/lookup", &lookup(question))
            .await;
        assert!(other["hit"].is_null(), "{sql} served: {other}");
    }

    // Auto-promotion counts distinct keys: one gateway recording a pair three times does not
    // promote it; a third key does.
    let settings = json!({"request_id": "s1", "settings": {"sql_similarity": 0.92,
                          "sql_ttl_seconds": 900, "auto_promote": true}});
    let written = adm
        .request(Method::PUT, "/v1/admin/shared/settings", Some(&settings))
        .await
        .unwrap();
    assert_eq!(written.status, StatusCode::OK, "{}", written.text());
    let example = |id: &str, question: &str| {
        json!({"request_id": id, "question": question, "route": "nl2sql", "confidence": 0.95,
               "sql": ORDERS})
    };
    let first = gateways[0]
        .must_post("/v1/few-shot/examples", &example("r0", question))
        .await;
    let approved = first["example"]["example_id"].as_str().unwrap().to_owned();
    adm.must_post(
        &format!("/v1/admin/few-shot/examples/{approved}/approve"),
        &json!({"request_id": "a0"}),
    )
    .await;
    let near = "How many orders did we get last week, please?";
    for i in 0..3 {
        let ack = gateways[0]
            .must_post("/v1/few-shot/examples", &example(&format!("one{i}"), near))
            .await;
        assert_eq!(
            ack["promoted"],
            false,
            "success {} of one key: {ack}",
            i + 1
        );
    }
    let ack = gateways[1]
        .must_post("/v1/few-shot/examples", &example("two", near))
        .await;
    assert_eq!(ack["promoted"], false, "two keys: {ack}");
    let ack = gateways[2]
        .must_post("/v1/few-shot/examples", &example("three", near))
        .await;
    assert_eq!(ack["promoted"], true, "three keys: {ack}");
    assert_eq!(ack["example"]["status"], "approved", "{ack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenants_actor_is_taken_over_with_its_sets_when_its_node_is_sigkilled() {
    let sandbox = Sandbox::new();
    let spec = |id: &str| {
        sandbox
            .shared_node(id)
            .set("inference.query-deadline", "60s")
    };
    let mut a = spec("shared-a").start().await;
    let mut b = spec("shared-b").start().await;
    let clients = [("shared-a", a.client()), ("shared-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(30)).await;
    // The tenant's actor lives where its reserved key's shard does.
    let owner = owners[&shard("#shared")].clone();
    let (victim, survivor) = if owner == "shared-a" {
        (&mut a, b.client())
    } else {
        (&mut b, a.client())
    };
    // Written through the survivor: forwarded to the owner, stored under its lease.
    survivor
        .must_post(
            "/v1/sql-cache",
            &sql_put("k1", "How many orders did we get last week?"),
        )
        .await;
    let recorded = survivor
        .must_post(
            "/v1/few-shot/examples",
            &json!({"request_id": "k2", "question": "Revenue by region this quarter",
                    "sql": "SELECT region, sum(amount) FROM sales GROUP BY region",
                    "route": "nl2sql", "confidence": 0.95}),
        )
        .await;
    let example = recorded["example"]["example_id"]
        .as_str()
        .unwrap()
        .to_owned();
    survivor
        .must_post(
            &format!("/v1/admin/few-shot/examples/{example}/approve"),
            &json!({"request_id": "k3"}),
        )
        .await;

    victim.kill();
    let killed = Instant::now();
    // Served again by the survivor, by meaning: its index was rebuilt from stored vectors.
    let paraphrase = lookup("how many orders did we receive last week");
    let hit = loop {
        let reply = survivor
            .request(Method::POST, "/v1/sql-cache/lookup", Some(&paraphrase))
            .await;
        if let Ok(reply) = reply
            && reply.status == StatusCode::OK
            && !reply.json()["hit"].is_null()
        {
            break reply.json();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "the tenant's sets were not served again within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let similarity = hit["hit"]["similarity"].as_f64().unwrap();
    assert!((0.92..1.0).contains(&similarity), "{hit}");
    let served = survivor
        .must_post(
            "/v1/few-shot/search",
            &json!({"question": "revenue by region for this quarter", "route": "nl2sql"}),
        )
        .await;
    assert_eq!(
        served["examples"][0]["example"]["example_id"],
        example.as_str(),
        "{served}"
    );
    // A retry of a write acknowledged before the kill replays on the new owner.
    let retried = survivor
        .must_post(
            "/v1/sql-cache",
            &sql_put("k1", "How many orders did we get last week?"),
        )
        .await;
    assert_eq!(retried["replayed"], true, "{retried}");
    println!(
        "tenant actor taken over: served again {:.2} s after the SIGKILL",
        killed.elapsed().as_secs_f64()
    );
}

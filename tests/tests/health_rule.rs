//! The validation gate's health rule, through a real node with master keys: a message whose
//! user names a health condition (and their age) is distilled with those identity facts in
//! the version's identity anchor, protected (`protection: high`, sealed at rest), noticed to
//! the tenant's admins and audited, both without the condition; gateways read the version
//! only as sensitive reads, refused past the breaker's limit; forgetting the user removes the
//! notice.

use engram_tests::harness::Sandbox;
use hyper::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_condition_is_protected_noticed_audited_and_read_only_as_a_sensitive_read() {
    let sandbox = Sandbox::new();
    let keys = sandbox.path().join("master.keys");
    engram_tests::harness::write_secret(&keys, &format!("1 {}\n", "5d".repeat(32)));
    let node = sandbox
        .node("health")
        .set(
            "security.master-key-file",
            keys.to_string_lossy().into_owned(),
        )
        .set("security.sensitive-read-limit", 2)
        .start()
        .await;
    let (gateway, _) = node.must_make_key("acme", "gateway", "g").await;
    let (admin, _) = node.must_make_key("acme", "admin", "a").await;
    let (gateway, admin) = (
        node.client().with_key(&gateway),
        node.client().with_key(&admin),
    );

    let ack = gateway
        .must_post(
            "/write",
            &json!({"user_id": "hana", "message": "我今年35岁，有高血压，帮我预约明天体检"}),
        )
        .await;
    assert_eq!(ack["intents"][0]["intent_type"], "appointment", "{ack}");
    let version = ack["intents"][0]["version"].as_i64().expect("a version");

    // The tenant's admins are told, without the condition.
    let notices = admin.must_get("/v1/admin/notices").await;
    let notice = &notices["notices"][0];
    assert_eq!(
        (
            &notice["user_id"],
            &notice["reason"],
            &notice["intent_type"],
            &notice["version"],
            &notice["sealed"]
        ),
        (
            &json!("hana"),
            &json!("health_condition"),
            &json!("appointment"),
            &json!(version),
            &json!(true)
        ),
        "{notices}"
    );
    let audit = admin
        .must_get("/v1/admin/audit?action=intent.health_protected&user=hana")
        .await;
    assert_eq!(audit["entries"].as_array().unwrap().len(), 1, "{audit}");
    for told in [notices.to_string(), audit.to_string()] {
        assert!(
            !told.contains("hypertension") && !told.contains("高血压"),
            "{told}"
        );
    }

    // A gateway reads the identity facts, as sensitive reads: the third is refused.
    for read in 0..2 {
        let recalled = gateway
            .must_get("/recall?user_id=hana&intent_type=appointment")
            .await;
        let fields = &recalled["intents"][0]["fields"];
        assert_eq!(
            (
                &fields["identity_anchor"]["age"],
                &fields["identity_anchor"]["health_condition"],
                &fields["protection"],
                &fields["sealed"]
            ),
            (
                &json!(35),
                &json!(["hypertension"]),
                &json!("high"),
                &json!(true)
            ),
            "read {read}: {recalled}"
        );
    }
    let refused = gateway
        .get("/recall?user_id=hana&intent_type=appointment")
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text());
    assert_eq!(refused.json()["code"], "approval_required");

    // Forgetting the user takes the notice with it.
    let forgotten = admin.delete("/v1/users/hana").await.unwrap();
    assert_eq!(forgotten.status, StatusCode::OK, "{}", forgotten.text());
    let notices = admin.must_get("/v1/admin/notices").await;
    assert_eq!(notices["notices"], json!([]), "{notices}");
}

//! Personal data through a real node: a conversation full of it at debug log level. No log
//! line carries any of it, no answer of the gateway carries a raw ID, bank card, passport or
//! mobile number, storage records each turn's and memory's personal-data level, and logs
//! name users by a pseudonym keyed per deployment.

use engram_storage::model::{MemoryKind, PiiLevel, RedactionLevel};
use engram_tests::harness::{Sandbox, turn};
use serde_json::json;

const ID: &str = "11010519491231002X";
const CARD: &str = "6222020200112233446";
const MOBILE: &str = "13812345678";
const EMAIL: &str = "li.lei@example.com";
const PASSPORT: &str = "E12345678";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personal_data_never_reaches_logs_and_is_masked_for_the_gateway() {
    let mut node = Sandbox::new()
        .node("privacy")
        .set("log.level", "debug")
        .start()
        .await;
    let http = node.client();
    let user = "pii-user";
    let texts = [
        format!("我的身份证号是{ID}，手机{MOBILE}"),
        format!("I prefer paying with card {CARD}; mail me at {EMAIL}"),
        format!("my passport is {PASSPORT}, please book the flight"),
    ];
    let mut answers = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        answers.push(
            http.must_append_turn(
                user,
                &turn(&format!("p-{i}"), "s1", text, &format!("noted {CARD}")),
            )
            .await,
        );
    }
    answers.push(
        http.must_post(
            &format!("/v1/users/{user}/feedback"),
            &json!({ "request_id": "p-fb", "session_id": "s1", "turn_seq": 1, "rating": "dislike",
                     "corrected_sql": format!("select * from cards where no = '{CARD}'"),
                     "comment": format!("the card is {CARD}, not the ID {ID}") }),
        )
        .await,
    );
    answers.push(
        http.must_create_memory(
            user,
            &json!({ "request_id": "p-mem", "kind": "profile", "text": format!("ID {ID}"),
                     "status": "active" }),
        )
        .await,
    );
    answers.push(
        http.must_context(user, "s1", &format!("what is the card {CARD}?"))
            .await,
    );
    answers.push(
        http.must_post(
            &format!("/v1/users/{user}/memories/search"),
            &json!({ "query": format!("ID {ID}"), "k": 10 }),
        )
        .await,
    );
    answers.push(http.must_get(&format!("/v1/users/{user}/memories")).await);
    answers.push(json!(http.must_session_turns(user, "s1").await));
    answers.push(
        http.must_post(
            "/write",
            &json!({ "user_id": user, "request_id": "p-w", "intent_type": "renewal",
                     "fields": { "id_number": ID, "phone": MOBILE } }),
        )
        .await,
    );
    answers.push(
        http.must_get(&format!("/recall?user_id={user}&intent_type=renewal"))
            .await,
    );
    let bad = http
        .append_turn(user, &json!({ "request_id": ID, "user_text": CARD }))
        .await
        .unwrap();
    answers.push(json!(bad.text()));

    for answer in &answers {
        let text = answer.to_string();
        for raw in [ID, CARD, PASSPORT, MOBILE] {
            assert!(
                !text.contains(raw),
                "a gateway answer carries {raw}: {text}"
            );
        }
    }
    let context = answers[5].to_string();
    assert!(
        context.contains("**************002X") && context.contains("*******5678"),
        "masks keep the last 4 only, mobile numbers included: {context}"
    );

    node.terminate().await;
    let log = node.log();
    assert!(
        log.iter().any(|l| l.contains("DEBUG")),
        "debug logging was on:\n{}",
        log.join("\n")
    );
    for line in &log {
        for raw in [ID, CARD, MOBILE, EMAIL, PASSPORT, "li.lei", user] {
            assert!(
                !line.contains(raw),
                "a log line carries personal data ({raw}): {line}"
            );
        }
    }

    // Storage knows the levels.
    let store = engram_storage::Store::sqlite(
        node.spec().sqlite_path(),
        engram_storage::sqlite::SqliteOptions::default(),
    )
    .unwrap();
    let ks = engram_storage::Keyspace::new("engram");
    let (turns, profile) = store
        .read(move |txn| {
            let mut u = engram_storage::data::UserData::new(txn, &ks, "default", "pii-user");
            Ok((u.turns_from("s1", 0)?, u.records(MemoryKind::Profile)?))
        })
        .await
        .unwrap();
    assert!(
        turns.iter().all(|t| t.pii_level == PiiLevel::High),
        "{turns:?}"
    );
    let api = profile
        .iter()
        .find(|r| r.summary_text.contains(ID))
        .expect("the API-written profile memory");
    assert_eq!(api.pii_level, PiiLevel::High);
    assert_eq!(api.redaction_level, RedactionLevel::Summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_user_leaves_nothing_in_any_file_the_node_wrote() {
    forgetting_leaves_nothing_in_any_file("aes-256-gcm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_user_leaves_nothing_in_any_file_under_sm4_gcm_either() {
    forgetting_leaves_nothing_in_any_file("sm4-gcm").await;
}

async fn forgetting_leaves_nothing_in_any_file(cipher: &str) {
    let sandbox = Sandbox::new();
    let keys = sandbox.path().join("master.keys");
    std::fs::write(&keys, format!("1 {}\n", "ab".repeat(32))).unwrap();
    let spec = sandbox
        .node("shred")
        .set("security.master-key-file", keys.to_str().unwrap())
        .set("security.cipher", cipher);
    let mut node = spec.start().await;
    let http = node.client();
    let (user, other) = ("shred-me-7", "keep-me-8");
    let secret = "zanzibar-osprey";
    for (i, who) in [user, other].iter().enumerate() {
        http.must_append_turn(
            who,
            &turn(
                &format!("s-{i}"),
                "s1",
                &format!("I prefer {secret} reports, card {CARD}"),
                "ok",
            ),
        )
        .await;
    }
    let forgotten = http.delete(&format!("/v1/users/{user}")).await.unwrap();
    assert!(forgotten.status.is_success(), "{}", forgotten.text());
    // The other user is intact and readable (their data key was untouched).
    let kept = http.must_session_turns(other, "s1").await;
    assert_eq!(kept.len(), 1);
    node.terminate().await;

    let mut files = vec![];
    let mut dirs = vec![node.spec().data_dir().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty());
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        for needle in [user.as_bytes(), secret.as_bytes(), CARD.as_bytes()] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} found in {}",
                String::from_utf8_lossy(needle),
                path.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_name_users_by_a_pseudonym_keyed_per_deployment() {
    // A phone-number-like user id: an unkeyed hash of it is reversed by hashing every phone
    // number. Two deployments (two stores, two peppers) log it differently, and neither logs
    // the unkeyed placement hash.
    let user = "13800138000";
    let mut pseudonyms = Vec::new();
    for name in ["deploy-a", "deploy-b"] {
        let mut node = Sandbox::new()
            .node(name)
            .set("log.level", "debug")
            .start()
            .await;
        node.client()
            .must_append_turn(user, &turn("r1", "s1", "hello", "hi"))
            .await;
        node.terminate().await;
        let log = node.log();
        let started = log
            .iter()
            .find(|l| l.contains("user actor started"))
            .unwrap_or_else(|| panic!("no actor start logged:\n{}", log.join("\n")));
        let pseudonym = started
            .split_whitespace()
            .find_map(|field| field.strip_prefix("user="))
            .unwrap_or_else(|| panic!("no user field: {started}"))
            .trim_matches('"')
            .to_owned();
        assert_eq!(pseudonym.len(), 16, "{started}");
        assert!(!log.iter().any(|l| l.contains(user)));
        pseudonyms.push(pseudonym);
    }
    let unkeyed = format!(
        "{:016x}",
        engram_actors::placement::UserKey::new("default", user).hash64()
    );
    assert!(
        !pseudonyms.contains(&unkeyed),
        "the log pseudonym is the unkeyed hash: {pseudonyms:?}"
    );
    assert_ne!(
        pseudonyms[0], pseudonyms[1],
        "two deployments with different secrets give different pseudonyms"
    );
}

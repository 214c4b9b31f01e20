//! Personal data through a real node: a conversation full of it at debug log level. No log
//! line carries any of it, no answer of the gateway carries a raw ID, bank card, passport or
//! mobile number, storage records each turn's and memory's personal-data level, and logs
//! name users by a pseudonym keyed per deployment.

use engram_storage::types::{MemoryKind, PiiLevel, RedactionLevel};
use std::path::{Path, PathBuf};

use engram_tests::harness::{Sandbox, node_binary, turn, write_secret};
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

/// Forgetting is final as soon as it is answered: while the node still runs (its WAL open),
/// after a SIGKILL (the WAL left as it was) and in a backup taken afterwards, no file under
/// the data directory holds the forgotten user's id, text or card number, with or without
/// encryption at rest. The control: another user, written the same way, is found there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_user_leaves_nothing_in_any_file_while_running_or_after_a_kill() {
    forgetting_leaves_nothing_in_any_file(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_user_leaves_nothing_in_any_file_under_aes_256_gcm() {
    forgetting_leaves_nothing_in_any_file(Some("aes-256-gcm")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_user_leaves_nothing_in_any_file_under_sm4_gcm() {
    forgetting_leaves_nothing_in_any_file(Some("sm4-gcm")).await;
}

/// The files under `dir` (recursively) holding `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = vec![];
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        // The running node may remove a file or folder between the listing and the read.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path);
            }
        }
    }
    found
}

/// Checks that no file under the data directory holds anything of the forgotten user, and
/// that the kept user's `controls` are found there.
fn assert_forgotten(data_dir: &Path, forgotten: &[&str], controls: &[&str], when: &str) {
    for needle in forgotten {
        let found = files_holding(data_dir, needle.as_bytes());
        assert!(found.is_empty(), "{when}: {needle} found in {found:?}");
    }
    for needle in controls {
        assert!(
            !files_holding(data_dir, needle.as_bytes()).is_empty(),
            "{when}: the control {needle} is in no file: the scan proves nothing"
        );
    }
}

async fn forgetting_leaves_nothing_in_any_file(cipher: Option<&str>) {
    let sandbox = Sandbox::new();
    let mut spec = sandbox.node("shred");
    if let Some(cipher) = cipher {
        let keys = sandbox.path().join("master.keys");
        write_secret(&keys, &format!("1 {}\n", "ab".repeat(32)));
        spec = spec
            .set("security.master-key-file", keys.to_str().unwrap())
            .set("security.cipher", cipher);
    }
    let mut node = spec.start().await;
    let http = node.client();
    let (user, other) = ("shred-me-7", "keep-me-8");
    let (secret, kept_secret) = ("zanzibar-osprey", "kilimanjaro-heron");
    for (who, marker) in [(user, secret), (other, kept_secret)] {
        for i in 0..12 {
            http.must_append_turn(
                who,
                &turn(
                    &format!("{who}-{i}"),
                    "s1",
                    &format!("I prefer {marker} reports number {i}, card {CARD}"),
                    "ok",
                ),
            )
            .await;
        }
        http.must_create_memory(
            who,
            &json!({ "request_id": format!("{who}-m"), "kind": "profile",
                     "text": format!("likes {marker}"), "status": "active" }),
        )
        .await;
    }
    http.must_drain_pipeline().await;
    // Sealed values hide the markers; ids are in the keys either way.
    let controls: Vec<&str> = if cipher.is_some() {
        vec![other]
    } else {
        vec![other, kept_secret]
    };
    let data_dir = node.spec().data_dir().to_path_buf();
    let before: &[&str] = if cipher.is_some() {
        &[user]
    } else {
        &[user, secret]
    };
    assert_forgotten(&data_dir, &[], before, "before forgetting");

    let forgotten = http.delete(&format!("/v1/users/{user}")).await.unwrap();
    assert!(forgotten.status.is_success(), "{}", forgotten.text());
    let gone = [user, secret];
    assert_forgotten(&data_dir, &gone, &controls, "while the node runs");
    // The other user is intact and readable (their data key was untouched).
    let kept = http.must_session_turns(other, "s1").await;
    assert_eq!(kept.len(), 12);

    // A backup taken afterwards, into the data directory.
    let backup = std::process::Command::new(node_binary().unwrap())
        .arg("backup")
        .arg("--config")
        .arg(node.spec().config_path())
        .arg("--to")
        .arg(data_dir.join("after-forget.sqlite"))
        .output()
        .unwrap();
    assert!(
        backup.status.success(),
        "{}",
        String::from_utf8_lossy(&backup.stderr)
    );
    let copy = std::fs::read(data_dir.join("after-forget.sqlite")).unwrap();
    assert!(
        copy.windows(other.len()).any(|w| w == other.as_bytes()),
        "the backup holds the kept user"
    );

    // A crash leaves the WAL as it was: still nothing.
    node.kill();
    assert!(
        Path::new(&format!("{}-wal", node.spec().sqlite_path().display())).exists(),
        "SIGKILL leaves the WAL"
    );
    assert_forgotten(&data_dir, &gone, &controls, "after SIGKILL");
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

/// The mode bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Whatever the umask it is started with, a node keeps its files to itself: the data
/// directory (here made 0755 first, as an older version or umask 022 left it) becomes 0700,
/// the store, its WAL and shared memory and a backup are 0600; and an admin key or master key
/// file that group or others may read stops the node with an error naming the setting, the
/// path and the mode, never the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_keeps_its_files_private_and_refuses_key_files_open_to_others() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new();
    let spec = sandbox.node("files");
    std::fs::create_dir_all(spec.data_dir()).unwrap();
    std::fs::set_permissions(spec.data_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut node = spec.start().await;
    node.client()
        .must_append_turn("files-user", &turn("f-1", "s1", "hello", "hi"))
        .await;
    let backup = sandbox.path().join("backup.sqlite");
    let out = std::process::Command::new(node_binary().unwrap())
        .arg("backup")
        .arg("--config")
        .arg(node.spec().config_path())
        .arg("--to")
        .arg(&backup)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(node.spec().data_dir()), 0o700, "the data directory");
    let mut files = vec![backup];
    for entry in std::fs::read_dir(node.spec().data_dir()).unwrap() {
        files.push(entry.unwrap().path());
    }
    assert!(files.iter().any(|f| f.to_string_lossy().ends_with("-wal")));
    for file in &files {
        assert_eq!(
            mode(file) & 0o077,
            0,
            "{} is {:04o}",
            file.display(),
            mode(file)
        );
    }
    node.terminate().await;

    let secret = "0123456789abcdef0123456789abcdef0123456789abcdef";
    let open_admin = sandbox.path().join("open-admin.key");
    std::fs::write(&open_admin, secret).unwrap();
    std::fs::set_permissions(&open_admin, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open_keys = sandbox.path().join("open-master.keys");
    std::fs::write(&open_keys, format!("1 {}\n", "cd".repeat(32))).unwrap();
    std::fs::set_permissions(&open_keys, std::fs::Permissions::from_mode(0o640)).unwrap();
    for (setting, path, shown) in [
        ("security.admin-key-file", &open_admin, "0644"),
        ("security.master-key-file", &open_keys, "0640"),
    ] {
        let stderr = sandbox
            .node(&format!("open-{}", shown))
            .set(setting, path.to_str().unwrap())
            .refused_start()
            .await;
        assert!(
            stderr.contains(&format!("{setting} {}", path.display())) && stderr.contains(shown),
            "{stderr}"
        );
        assert!(
            !stderr.contains(secret) && !stderr.contains("cdcdcdcd"),
            "a key leaked: {stderr}"
        );
    }
}

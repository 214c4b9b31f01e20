//! Tests of reading secret files: missing, too open, too short, and a good cookie.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn config_with_cookie(dir: &Path, name: &str) -> Config {
    let mut config = Config::default();
    config.node.data_dir = dir.to_owned();
    config.cluster.cookie_file = name.into();
    config
}

#[test]
fn a_missing_cookie_file_names_the_key_and_the_resolved_path() {
    let dir = tempfile::tempdir().unwrap();
    let err = cookie(&config_with_cookie(dir.path(), "cookie")).expect_err("missing");
    let message = err.to_string();
    let path = dir.path().join("cookie");
    assert!(
        message.starts_with(&format!(
            "cluster.cookie-file {}: cannot open",
            path.display()
        )),
        "{message}"
    );
}

#[test]
fn a_cookie_file_open_to_group_or_others_is_refused_without_showing_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cookie");
    for mode in [0o644, 0o640, 0o604, 0o620] {
        write(&path, "correct-horse-battery-staple", mode);
        let err = cookie(&config_with_cookie(dir.path(), "cookie")).expect_err("open mode");
        let message = err.to_string();
        assert!(
            message.contains(&format!("{mode:04o}")) && message.contains("chmod 600"),
            "{message}"
        );
        assert!(!message.contains("horse"), "the secret leaked: {message}");
    }
}

#[test]
fn a_short_cookie_is_refused_and_a_good_one_is_read_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cookie");
    write(&path, "short\n", 0o600);
    let err = cookie(&config_with_cookie(dir.path(), "cookie")).expect_err("short");
    assert!(err.to_string().contains("5-character"), "{err}");

    write(&path, "  0123456789abcdef-cluster\n", 0o400);
    let read = cookie(&config_with_cookie(dir.path(), "cookie")).expect("good cookie");
    assert_eq!(read, "0123456789abcdef-cluster");
    // An absolute path is taken as it is.
    let elsewhere = tempfile::tempdir().unwrap();
    let read = cookie(&config_with_cookie(
        elsewhere.path(),
        path.to_str().unwrap(),
    ))
    .expect("absolute path");
    assert_eq!(read, "0123456789abcdef-cluster");
}

#[test]
fn a_directory_is_not_a_secret_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("cookie");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = read("cluster.cookie-file", &sub).expect_err("a directory");
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn admin_and_master_key_files_open_to_group_or_others_are_refused_without_showing_them() {
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin.key");
    let master = dir.path().join("master.keys");
    let admin_secret = "a-root-admin-key-of-forty-characters-0042";
    let master_line = format!("1 {}\n", "9f".repeat(32));
    let mut config = Config::default();
    config.security.admin_key_file = Some(admin.clone());
    for mode in [0o644, 0o640, 0o604] {
        write(&admin, admin_secret, mode);
        write(&master, &master_line, mode);
        let refused = [
            admin_key(&config).expect_err("open admin key").to_string(),
            master_keys(&master)
                .map(|_| ())
                .expect_err("open master keys")
                .to_string(),
        ];
        for (message, (setting, path)) in refused.iter().zip([
            ("security.admin-key-file", &admin),
            ("security.master-key-file", &master),
        ]) {
            assert!(
                message.contains(&format!("{setting} {}", path.display()))
                    && message.contains(&format!("{mode:04o}")),
                "{message}"
            );
            assert!(
                !message.contains("forty") && !message.contains("9f9f"),
                "a secret leaked: {message}"
            );
        }
    }
    write(&admin, admin_secret, 0o600);
    write(&master, &master_line, 0o400);
    assert_eq!(
        admin_key(&config).expect("owner-only admin key"),
        admin_secret
    );
    master_keys(&master).expect("owner-only master keys");
}

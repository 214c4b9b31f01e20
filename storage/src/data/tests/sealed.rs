//! Sealed user values stored as ciphertext, and shredded from the database file by
//! forgetting.

use super::*;

/// Sealed user values: stored as ciphertext bound to their keys, read back as written, and
/// after forgetting, nothing of the user (text or id) is left in the keyspace or in the
/// database file.
#[test]
fn sealed_values_are_ciphertext_and_forgetting_shreds_them_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sealed.sqlite");
    let keys = crate::crypto::MasterKeys::new([(1, [9u8; 32])]).unwrap();
    let ks = Keyspace::new("engram").with_master_keys(keys);
    let secret = "secret-alpha 11010519491231002X";
    {
        let store = Store::sqlite(&path, crate::sqlite::SqliteOptions::default()).unwrap();
        store
            .run_blocking(|txn| {
                let mut u = UserData::new(txn, &ks, "acme", "shredded-user");
                let mut t = turn("s1", secret, 1_000);
                u.append_turn(&mut t, RULE)?;
                let mut r = record("m1", MemoryKind::Profile, None);
                r.summary_text = secret.into();
                u.put_record(&r)?;
                u.put_embedding(
                    "m1",
                    &Embedding {
                        model: "e5".into(),
                        vector: vec![0.25; 8],
                    },
                )
            })
            .unwrap();
        // Read back through the same keys.
        let (turns, record) = store
            .read_blocking(|txn| {
                let mut u = UserData::new(txn, &ks, "acme", "shredded-user");
                Ok((u.turns_from("s1", 0)?, u.record(MemoryKind::Profile, "m1")?))
            })
            .unwrap();
        assert_eq!(turns[0].user_text, secret);
        assert_eq!(record.unwrap().summary_text, secret);
        // Raw values hold no plaintext.
        let all = ks.all();
        let rows = store
            .read_blocking(|txn| txn.get_range(&all.begin, &all.end, RangeOptions::default()))
            .unwrap();
        assert!(
            rows.iter()
                .any(|(_, v)| v.first() == Some(&crate::crypto::FORMAT_SEALED))
        );
        for (_, v) in &rows {
            assert!(
                !v.windows(12).any(|w| w == b"secret-alpha"),
                "plaintext at rest"
            );
        }
        // Without the master keys the values do not open.
        let plain = Keyspace::new("engram");
        let blind = store.read_blocking(|txn| {
            UserData::new(txn, &plain, "acme", "shredded-user").turns_from("s1", 0)
        });
        assert!(blind.is_err());

        store
            .run_blocking(|txn| UserData::new(txn, &ks, "acme", "shredded-user").forget())
            .unwrap();
        let rows = store
            .read_blocking(|txn| txn.get_range(&all.begin, &all.end, RangeOptions::default()))
            .unwrap();
        for (k, v) in &rows {
            for needle in [&b"shredded-user"[..], b"secret-alpha"] {
                assert!(!k.windows(needle.len()).any(|w| w == needle));
                assert!(!v.windows(needle.len()).any(|w| w == needle));
            }
        }
    }
    // The store is closed (WAL checkpointed); no file of it holds the user's text or id.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        for needle in [
            &b"shredded-user"[..],
            b"secret-alpha",
            b"11010519491231002X",
        ] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} found in a file",
                String::from_utf8_lossy(needle)
            );
        }
    }
}

/// Every file of an open store (database, WAL, shared memory), scanned for `needle`.
fn files_hold(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            bytes
                .windows(needle.len())
                .any(|w| w == needle)
                .then(|| path.display().to_string())
        })
        .collect()
}

/// Forgetting, then erasing the history, while the store stays open (the node's case): the
/// WAL holds every page the user's writes touched until it is checkpointed and truncated, and
/// pages keep copies of cells that balancing moved in their unused space, so without
/// `erase_history` their text and id stay readable in `-wal` and in the database file. Sealed
/// or not; another user's values, written the same way, are found where they should be (the
/// control).
#[test]
fn an_open_store_erases_a_forgotten_user_from_every_file_sealed_or_not() {
    for sealed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("open.sqlite");
        let mut ks = Keyspace::new("engram");
        if sealed {
            ks = ks.with_master_keys(crate::crypto::MasterKeys::new([(1, [7u8; 32])]).unwrap());
        }
        let store = Store::sqlite(&path, crate::sqlite::SqliteOptions::default()).unwrap();
        for (user, text) in [
            ("gone-user-1", "marker-gone"),
            ("kept-user-2", "marker-kept"),
        ] {
            for i in 0..50 {
                store
                    .run_blocking(|txn| {
                        let mut u = UserData::new(txn, &ks, "acme", user);
                        u.append_turn(&mut turn("s1", &format!("{text} {i}"), i), RULE)
                    })
                    .unwrap();
            }
        }
        store
            .run_blocking(|txn| UserData::new(txn, &ks, "acme", "gone-user-1").forget())
            .unwrap();
        assert!(
            !files_hold(dir.path(), b"gone-user-1").is_empty(),
            "before the erase the WAL still holds the forgotten user (sealed: {sealed})"
        );
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.erase_history())
            .unwrap();
        for needle in [&b"gone-user-1"[..], b"marker-gone"] {
            let found = files_hold(dir.path(), needle);
            assert!(
                found.is_empty(),
                "{} in {found:?} (sealed: {sealed})",
                String::from_utf8_lossy(needle)
            );
        }
        assert!(!files_hold(dir.path(), b"kept-user-2").is_empty());
        if !sealed {
            assert!(!files_hold(dir.path(), b"marker-kept").is_empty());
        }
        // The store goes on working, and reads the kept user back.
        let kept = store
            .read_blocking(|txn| UserData::new(txn, &ks, "acme", "kept-user-2").turns_from("s1", 0))
            .unwrap();
        assert_eq!(kept.len(), 50);
    }
}

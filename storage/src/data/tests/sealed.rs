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

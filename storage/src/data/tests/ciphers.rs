//! Sealed user values through the data layer under either cipher, across a switch.

use super::{RULE, turn, with_user};
use crate::crypto::{Cipher, FORMAT_SEALED, FORMAT_SEALED_SM4, MasterKeys};
use crate::{Keyspace, RangeOptions, Store};

fn sealed_with(cipher: Cipher) -> Keyspace {
    let keys = MasterKeys::new([(1, [5u8; 32])])
        .unwrap()
        .with_cipher(cipher);
    Keyspace::new("engram").with_master_keys(keys)
}

#[test]
fn switching_the_cipher_keeps_every_value_readable_and_seals_new_ones_with_the_new_one() {
    let store = Store::in_memory().unwrap();
    let (aes, sm4) = (sealed_with(Cipher::Aes256Gcm), sealed_with(Cipher::Sm4Gcm));
    with_user(&store, &aes, "alice", |u| {
        u.append_turn(&mut turn("s", "before the switch", 1_000), RULE)
    });
    with_user(&store, &sm4, "alice", |u| {
        u.append_turn(&mut turn("s", "after the switch", 2_000), RULE)
    });
    for ks in [&aes, &sm4] {
        let texts: Vec<String> = with_user(&store, ks, "alice", |u| u.turns_from("s", 0))
            .into_iter()
            .map(|t| t.user_text)
            .collect();
        assert_eq!(texts, ["before the switch", "after the switch"]);
    }
    let keys = sm4.user("acme", "alice");
    let raw = |key: Vec<u8>| store.read_blocking(|txn| txn.get(&key)).unwrap().unwrap();
    assert_eq!(raw(keys.turn("s", 0))[0], FORMAT_SEALED);
    assert_eq!(raw(keys.turn("s", 1))[0], FORMAT_SEALED_SM4);
    assert_eq!(
        raw(keys.data_key())[4],
        Cipher::Aes256Gcm.id(),
        "the data key stays wrapped with AES-256-GCM, as it was made"
    );
    let all = sm4.all();
    let rows = store
        .read_blocking(|txn| txn.get_range(&all.begin, &all.end, RangeOptions::default()))
        .unwrap();
    assert!(
        !rows
            .iter()
            .any(|(_, v)| v.windows(6).any(|w| w == b"switch"))
    );

    // A user first seen after the switch gets an SM4-wrapped data key.
    with_user(&store, &sm4, "bob", |u| {
        u.append_turn(&mut turn("s", "new user", 3_000), RULE)
    });
    assert_eq!(
        raw(sm4.user("acme", "bob").data_key())[4],
        Cipher::Sm4Gcm.id()
    );
}

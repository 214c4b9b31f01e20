//! Tests of envelope encryption: the SM4-GCM known answer, both ciphers' round trips, values
//! and wrapped keys that stay readable across a cipher switch and a master-key rotation, and
//! the anchor keys.

use std::sync::Arc;

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

fn encryption(keys: MasterKeys, cipher: Cipher) -> Encryption {
    Encryption::new(Arc::new(keys.with_cipher(cipher)), cipher)
}

const BOTH: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::Sm4Gcm];

#[test]
fn sm4_gcm_matches_rfc_8998_appendix_a1() {
    let key = hex("0123456789ABCDEFFEDCBA9876543210");
    let nonce = hex("00001234567800000000ABCD");
    let aad = hex("FEEDFACEDEADBEEFFEEDFACEDEADBEEFABADDAD2");
    let plain = hex(
        "AAAAAAAAAAAAAAAABBBBBBBBBBBBBBBB CCCCCCCCCCCCCCCCDDDDDDDDDDDDDDDD
         EEEEEEEEEEEEEEEEFFFFFFFFFFFFFFFF EEEEEEEEEEEEEEEEAAAAAAAAAAAAAAAA",
    );
    let expected = hex(
        "17F399F08C67D5EE19D0DC9969C4BB7D 5FD46FD3756489069157B282BB200735
         D82710CA5C22F0CCFA7CBF93D496AC15 A56834CBCF98C397B4024A2691233B8D
         83DE3541E4C2B58177E065A9BF7B62EC",
    );
    let cipher = Sm4Gcm::new_from_slice(&key).unwrap();
    let nonce = aes_gcm::Nonce::from_slice(&nonce);
    let sealed = cipher
        .encrypt(
            nonce,
            Payload {
                msg: &plain,
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(sealed, expected, "ciphertext then tag");
    let opened = cipher
        .decrypt(
            nonce,
            Payload {
                msg: &sealed,
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(opened, plain);
    let mut forged = sealed;
    forged[0] ^= 1;
    assert!(
        cipher
            .decrypt(
                nonce,
                Payload {
                    msg: &forged,
                    aad: &aad
                }
            )
            .is_err()
    );
}

/// The documented derivation, computed from RFC 5869 by hand: PRK = HMAC(0^32, material),
/// OKM = HMAC(PRK, info ‖ 0x01), first 16 bytes.
#[test]
fn sm4_keys_are_hkdf_sha256_of_the_material_as_documented() {
    let material = [0x5au8; 32];
    let prk = hmac(&[0u8; 32], &[&material]);
    let okm = hmac(&prk, &[SM4_DATA_KEY, &[1]]);
    assert_eq!(*sm4_key(&material, SM4_DATA_KEY), okm[..16]);
    // The data key's SM4 values open with an SM4-GCM keyed that way.
    let sealed = DataKey::new(&material, Cipher::Sm4Gcm)
        .seal(b"k", b"hello")
        .unwrap();
    let by_hand = Sm4Gcm::new_from_slice(&okm[..16]).unwrap();
    let (nonce, body) = sealed[1..].split_at(NONCE);
    let opened = by_hand
        .decrypt(
            aes_gcm::Nonce::from_slice(nonce),
            Payload {
                msg: body,
                aad: b"k",
            },
        )
        .unwrap();
    assert_eq!(opened, b"hello");
}

#[test]
fn sealed_values_open_only_with_their_key_and_place_under_either_cipher() {
    for cipher in BOTH {
        let enc = encryption(MasterKeys::new([(1, [7u8; 32])]).unwrap(), cipher);
        let (key, wrapped) = enc.new_data_key("acme").unwrap();
        let sealed = key.seal(b"k1", b"hello").unwrap();
        assert_eq!(sealed[0], cipher.sealed_format(), "{cipher:?}");
        assert!(is_sealed(&sealed));
        assert!(!sealed.windows(5).any(|w| w == b"hello"));
        assert_eq!(key.open(b"k1", &sealed).unwrap(), b"hello");
        assert!(key.open(b"k2", &sealed).is_err(), "bound to its key");
        let reopened = enc.open_data_key("acme", &wrapped).unwrap();
        assert_eq!(reopened.open(b"k1", &sealed).unwrap(), b"hello");
        assert!(
            enc.open_data_key("other", &wrapped).is_err(),
            "bound to its tenant"
        );
        let (other, _) = enc.new_data_key("acme").unwrap();
        assert!(other.open(b"k1", &sealed).is_err());
    }
}

#[test]
fn relabelling_a_value_with_the_other_cipher_does_not_open_it() {
    let key = DataKey::new(&[3u8; 32], Cipher::Sm4Gcm);
    let mut sealed = key.seal(b"k", b"hello").unwrap();
    assert_eq!(sealed[0], FORMAT_SEALED_SM4);
    sealed[0] = FORMAT_SEALED;
    assert!(key.open(b"k", &sealed).is_err());
}

#[test]
fn data_written_under_one_cipher_stays_readable_after_switching_to_the_other() {
    for (before, after) in [
        (Cipher::Aes256Gcm, Cipher::Sm4Gcm),
        (Cipher::Sm4Gcm, Cipher::Aes256Gcm),
    ] {
        let master = || MasterKeys::new([(1, [1u8; 32])]).unwrap();
        let old = encryption(master(), before);
        let (key, record) = old.new_data_key("acme").unwrap();
        assert_eq!(record[4], before.id(), "the wrapped key names its cipher");
        let old_value = key.seal(b"k", b"written before").unwrap();

        let switched = encryption(master(), after);
        let key = switched.open_data_key("acme", &record).unwrap();
        assert_eq!(key.open(b"k", &old_value).unwrap(), b"written before");
        let new_value = key.seal(b"k", b"written after").unwrap();
        assert_eq!(
            new_value[0],
            after.sealed_format(),
            "new values use the new cipher"
        );
        let (_, new_record) = switched.new_data_key("acme").unwrap();
        assert_eq!(new_record[4], after.id());
        // And back: a node still on the old cipher reads what the new one wrote.
        let key = old.open_data_key("acme", &record).unwrap();
        assert_eq!(key.open(b"k", &new_value).unwrap(), b"written after");
        assert!(old.open_data_key("acme", &new_record).is_ok());
    }
}

/// A record as the key file's service wrote it before the cipher was configurable: the key
/// id, then the nonce and the AES-256-GCM ciphertext of the material under the tenant KEK.
#[test]
fn data_keys_wrapped_before_the_cipher_byte_still_open() {
    let master = [4u8; 32];
    let material = [8u8; 32];
    let kek = hmac(&master, &[b"engram tenant kek\0", b"acme"]);
    let nonce = [6u8; 12];
    let sealed = Aes256Gcm::new_from_slice(&kek)
        .unwrap()
        .encrypt(
            aes_gcm::Nonce::from_slice(&nonce),
            Payload {
                msg: &material,
                aad: b"acme",
            },
        )
        .unwrap();
    let record = [&7u32.to_be_bytes()[..], &nonce, &sealed].concat();
    assert_eq!(record.len(), 64);
    let value = DataKey::new(&material, Cipher::Aes256Gcm)
        .seal(b"k", b"old")
        .unwrap();
    for cipher in BOTH {
        let enc = encryption(MasterKeys::new([(7, master)]).unwrap(), cipher);
        let key = enc.open_data_key("acme", &record).unwrap();
        assert_eq!(key.open(b"k", &value).unwrap(), b"old");
    }
}

#[test]
fn rotation_keeps_old_data_keys_open() {
    for cipher in BOTH {
        let old = encryption(MasterKeys::new([(1, [1u8; 32])]).unwrap(), cipher);
        let (_, wrapped_old) = old.new_data_key("acme").unwrap();
        let rotated = encryption(
            MasterKeys::new([(1, [1u8; 32]), (2, [2u8; 32])]).unwrap(),
            cipher,
        );
        assert_eq!(rotated.key_service().current(), 2);
        assert!(rotated.open_data_key("acme", &wrapped_old).is_ok());
        let (_, wrapped_new) = rotated.new_data_key("acme").unwrap();
        assert_eq!(&wrapped_new[..4], &2u32.to_be_bytes());
        assert!(
            old.open_data_key("acme", &wrapped_new).is_err(),
            "key 2 is not loaded there"
        );
    }
}

#[test]
fn anchor_macs_are_per_tenant_apart_from_the_kek_and_survive_rotation() {
    let master = [9u8; 32];
    let one = encryption(MasterKeys::new([(1, master)]).unwrap(), Cipher::Aes256Gcm);
    let msg = b"resident-id\x0011010519491231002X";
    let macs = one.anchor_macs("acme", msg).unwrap();
    assert_eq!(macs.len(), 1);
    let (id, mac) = macs[0];
    assert_eq!(id, 1);
    let anchor_key = hmac(&master, &[b"engram tenant anchor key\0", b"acme"]);
    assert_eq!(
        mac,
        hmac(&anchor_key, &[msg]),
        "HMAC-SHA256 under the anchor key"
    );
    let kek = hmac(&master, &[b"engram tenant kek\0", b"acme"]);
    assert_ne!(mac, hmac(&kek, &[msg]), "not keyed by the KEK");
    assert_ne!(
        one.anchor_macs("other", msg).unwrap()[0].1,
        mac,
        "per tenant"
    );

    let rotated = encryption(
        MasterKeys::new([(1, master), (2, [10u8; 32])]).unwrap(),
        Cipher::Sm4Gcm,
    );
    let macs = rotated.anchor_macs("acme", msg).unwrap();
    assert_eq!(macs.iter().map(|m| m.0).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(macs[1].1, mac, "the old key still finds what it anchored");
    assert_ne!(macs[0].1, mac);
}

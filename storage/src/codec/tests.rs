//! Round-trip and failure tests of the value encoding.

use proptest::prelude::*;

use super::{FORMAT_POSTCARD, decode, encode};
use crate::Error;
use crate::types::{Embedding, Intent, Timestamp, Turn, WrittenUnder};

#[test]
fn values_start_with_the_format_byte() {
    let bytes = encode("n", &42u32).unwrap();
    assert_eq!(bytes[0], FORMAT_POSTCARD);
}

#[test]
fn unknown_format_and_garbage_are_decode_errors_not_panics() {
    let err = decode::<u32>("n", &[0x7f, 1, 2]).unwrap_err();
    assert!(matches!(err, Error::Decode { what: "n", .. }));
    assert!(
        err.to_string().contains("unknown format byte 0x7f"),
        "{err}"
    );
    assert!(matches!(decode::<u32>("n", &[]), Err(Error::Decode { .. })));
    assert!(matches!(
        decode::<Turn>("turn", &[FORMAT_POSTCARD, 0xff]),
        Err(Error::Decode { .. })
    ));
}

proptest! {
    #[test]
    fn turns_round_trip(
        session in ".{0,20}", seq: u64, user_text in ".{0,200}", assistant_text in ".{0,200}",
        entities in proptest::collection::vec("[a-z_]{1,12}", 0..5), at: i64, route in proptest::option::of("[a-z_]{1,20}"),
    ) {
        let turn = Turn {
            session_id: session, seq, request_id: "r".into(), trace_id: None, route,
            user_text, assistant_text, entities, created_at: Timestamp(at),
            written_under: (seq % 2 == 0).then(|| WrittenUnder { node: "n1".into(), epoch: seq }),
            pii_level: crate::types::PiiLevel::None,
        };
        prop_assert_eq!(decode::<Turn>("turn", &encode("turn", &turn)?)?, turn);
    }

    #[test]
    fn intents_and_embeddings_round_trip(
        version: i64, active: bool, fields in ".{0,100}",
        vector in proptest::collection::vec(-1.0f32..1.0, 0..64),
    ) {
        let intent = Intent {
            intent_type: "renewal".into(), version: Timestamp(version), fields, active, source_turn: Some(3),
        };
        prop_assert_eq!(decode::<Intent>("intent", &encode("intent", &intent)?)?, intent);
        let embedding = Embedding { model: "e5".into(), vector };
        prop_assert_eq!(decode::<Embedding>("embedding", &encode("embedding", &embedding)?)?, embedding);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// Fuzzing the value decoders: any bytes at all, including a valid format byte followed by
    /// garbage or by huge length prefixes, decode to a value or an error, never a panic, and
    /// never allocate by a length the bytes cannot back.
    #[test]
    fn any_stored_bytes_decode_or_fail_cleanly(
        tail in proptest::collection::vec(any::<u8>(), 0..256),
        format_byte in prop_oneof![Just(FORMAT_POSTCARD), any::<u8>()],
        huge in any::<bool>(),
    ) {
        let mut bytes = vec![format_byte];
        if huge {
            // A varint length prefix of about 2^56.
            bytes.extend([0xff; 8]);
            bytes.push(0x7f);
        }
        bytes.extend(tail);
        let _ = decode::<Turn>("turn", &bytes);
        let _ = decode::<crate::types::MemoryRecord>("memory record", &bytes);
        let _ = decode::<crate::types::SessionRow>("session", &bytes);
        let _ = decode::<Intent>("intent", &bytes);
        let _ = decode::<Embedding>("embedding", &bytes);
        let _ = decode::<crate::types::IdempotencyEntry>("idempotency", &bytes);
        let _ = decode::<crate::types::ShardLease>("shard lease", &bytes);
        let _ = decode::<crate::types::Member>("member", &bytes);
        let _ = decode::<crate::types::UserHeader>("header", &bytes);
    }
}

//! The matcher accepts exactly the prefixes of the texts a schema allows.

use serde_json::json;

use super::*;

fn schema() -> Schema {
    Schema::from_json(&json!({
        "type": "object",
        "properties": {
            "topic": {"type": "string"},
            "polarity": {"enum": ["like", "dislike"]},
            "strength": {"type": "number"},
            "count": {"type": "integer"},
            "explicit": {"type": "boolean"}
        }
    }))
    .unwrap()
}

fn accepts(text: &str) -> Option<bool> {
    let mut m = schema().matcher();
    m.feed(text.as_bytes()).then(|| m.is_complete())
}

#[test]
fn whole_outputs_are_complete_and_valid_json_under_the_schema() {
    // Without `required`, the properties come by name.
    let text = r#"{"count": 3, "explicit": true, "polarity": "dislike", "strength": -0.25, "topic": "饼图 \"pie\" \u00e9"}"#;
    assert_eq!(accepts(text), Some(true));
    let parsed: Value = serde_json::from_str(text).unwrap();
    assert_eq!(parsed["polarity"], "dislike");
}

#[test]
fn every_prefix_of_an_allowed_output_is_accepted_and_leaving_the_schema_is_not() {
    let text = r#"{"count": 10, "explicit": false, "polarity": "like", "strength": 0.5, "topic": "line charts"}"#;
    for end in 0..text.len() {
        assert_eq!(accepts(&text[..end]), Some(false), "prefix {end}");
    }
    for wrong in [
        r#"{"topic""#,                      // the schema's order: count comes first
        r#"{"count": 1.5"#,                 // an integer has no fraction
        r#"{"count": 01"#,                  // no leading zero
        r#"{"count": -"#,                   // fine so far ...
        r#"{"count": 1, "explicit": tru "#, // not a boolean
        r#"{"count": 1, "explicit": true, "polarity": "lo"#,
        r#"{"count": 1, "explicit": true, "polarity": "like", "strength": 1."#,
    ] {
        let verdict = accepts(wrong);
        if wrong.ends_with('-') || wrong.ends_with("1.") {
            assert_eq!(verdict, Some(false), "{wrong} is a prefix");
        } else {
            assert_eq!(verdict, None, "{wrong} leaves the schema");
        }
    }
    // A number must have its fraction before what follows.
    assert_eq!(
        accepts(r#"{"count": 1, "explicit": true, "polarity": "like", "strength": 1.,"#),
        None
    );
    // Control characters are not allowed raw in a string; nothing follows the object.
    let done = r#"{"count": 1, "explicit": true, "polarity": "like", "strength": 1, "topic": "x"}"#;
    assert_eq!(accepts(done), Some(true));
    assert_eq!(accepts(&format!("{done} ")), None);
    let raw = "{\"count\": 1, \"explicit\": true, \"polarity\": \"like\", \"strength\": 1, \"topic\": \"a\nb";
    assert_eq!(accepts(raw), None);
    // The output is parsed as UTF-8: no lone surrogate escape, no malformed sequence.
    let head = r#"{"count": 1, "explicit": true, "polarity": "like", "strength": 1, "topic": ""#;
    assert_eq!(accepts(&format!(r"{head}\ud800")), None);
    assert_eq!(accepts(&format!(r"{head}\u00e9")), Some(false));
    for bad in [
        &[0xff][..],
        &[0xc0, 0x80],
        &[0xed, 0xa0, 0x80],
        &[0xe4, 0x41],
    ] {
        let mut m = schema().matcher();
        assert!(m.feed(head.as_bytes()));
        assert!(!m.feed(bad), "{bad:x?}");
    }
    let mut m = schema().matcher();
    assert!(m.feed(head.as_bytes()) && m.feed("折".as_bytes()) && m.feed(&[0xe7, 0xba]));
}

#[test]
fn unsupported_schemas_are_refused_with_a_reason() {
    assert!(Schema::from_json(&json!({"type": "array"})).is_err());
    let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
    assert!(Schema::from_json(&nested).unwrap_err().contains("a: type"));
    let numbers = json!({"type": "object", "properties": {"a": {"enum": [1, 2]}}});
    assert!(
        Schema::from_json(&numbers)
            .unwrap_err()
            .contains("string enums")
    );
}

#[test]
fn required_sets_the_order_of_the_properties() {
    let schema = Schema::from_json(&json!({
        "type": "object",
        "properties": {"topic": {"type": "string"}, "polarity": {"enum": ["like", "dislike"]}},
        "required": ["topic", "polarity"]
    }))
    .unwrap();
    let mut m = schema.matcher();
    assert!(m.feed(br#"{"topic": "charts", "polarity": "like"}"#) && m.is_complete());
    let partial = json!({"type": "object", "properties": {"a": {"type": "string"},
        "b": {"type": "string"}}, "required": ["a"]});
    assert!(
        Schema::from_json(&partial)
            .unwrap_err()
            .contains("required")
    );
}

proptest::proptest! {
    /// Whatever the logits, decoding through the matcher yields only prefixes of allowed
    /// texts, and a closed object is valid JSON of the schema.
    #[test]
    fn decoding_under_any_logits_never_yields_invalid_json(
        seeds in proptest::collection::vec(proptest::num::u64::ANY, 1..120),
    ) {
        // A byte-level vocabulary: every byte alone, some multi-byte tokens, one special.
        let mut vocab: Vec<Option<Vec<u8>>> = (0..=255_u8).map(|b| Some(vec![b])).collect();
        for token in ["{\"", "\": ", ", \"", "like", "dislike", "\"}", "12", ".5", "true",
            "topic", "polarity", "strength", "count", "explicit", "折线图", "\\u00e9", "\\"] {
            vocab.push(Some(token.as_bytes().to_vec()));
        }
        vocab.push(None);
        let schema = schema();
        let mut matcher = schema.matcher();
        let mut out = Vec::new();
        for seed in seeds {
            // A pseudo-random order of the whole vocabulary from the seed: the "logits".
            let mut order: Vec<usize> = (0..vocab.len()).collect();
            order.sort_by_key(|&i| (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let (_, next, bytes) = pick(&matcher, order, &vocab).expect("a byte always fits");
            matcher = next;
            out.extend_from_slice(bytes);
            if matcher.is_complete() {
                break;
            }
        }
        if matcher.is_complete() {
            let parsed: Value = serde_json::from_slice(&out).expect("valid JSON");
            proptest::prop_assert!(parsed["topic"].is_string());
            proptest::prop_assert!(["like", "dislike"].contains(&parsed["polarity"].as_str().unwrap()));
            proptest::prop_assert!(parsed["strength"].is_number());
            // An integer in JSON's syntax (past i64, serde_json reads it as a float).
            proptest::prop_assert!(parsed["count"].as_f64().is_some_and(|v| v.fract() == 0.0));
            proptest::prop_assert!(parsed["explicit"].is_boolean());
        } else {
            // Still a prefix: some continuation closes it (here: a fresh matcher agrees).
            let mut again = schema.matcher();
            proptest::prop_assert!(again.feed(&out));
        }
    }
}

#[test]
fn a_bounded_string_takes_at_most_its_max_length_in_characters_then_only_its_closing_quote() {
    let schema = Schema::from_json(&json!({
        "type": "object",
        "properties": {"t": {"type": "string", "maxLength": 3}}
    }))
    .unwrap();
    let feeds = |text: &str| schema.matcher().feed(text.as_bytes());
    assert!(feeds(r#"{"t": "abc"}"#));
    assert!(
        feeds(r#"{"t": "你好吗"}"#),
        "characters, not bytes, are counted"
    );
    assert!(feeds(r#"{"t": "a\"c"}"#), "an escape is one character");
    assert!(!feeds(r#"{"t": "abcd"#));
    assert!(!feeds(r#"{"t": "你好吗呀"#));
    let bad = json!({"type": "object", "properties": {"t": {"type": "string", "maxLength": -1}}});
    assert!(Schema::from_json(&bad).unwrap_err().contains("maxLength"));
}

#[test]
fn a_string_with_a_min_length_cannot_close_before_it() {
    let schema = Schema::from_json(&json!({
        "type": "object",
        "properties": {"t": {"type": "string", "minLength": 2, "maxLength": 4}}
    }))
    .unwrap();
    let feeds = |text: &str| schema.matcher().feed(text.as_bytes());
    assert!(!feeds(r#"{"t": "a""#), "closed at one character");
    assert!(feeds(r#"{"t": "ab"}"#));
    assert!(feeds(r#"{"t": "摘要"}"#));
    let inverted = json!({"type": "object", "properties": {"t": {"type": "string", "minLength": 3, "maxLength": 2}}});
    assert!(Schema::from_json(&inverted).unwrap_err().contains("below"));
}

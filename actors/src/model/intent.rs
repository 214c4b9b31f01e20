//! Distilled intents as the memory model reads them: what a version is about, how urgent,
//! whether it is still served, and whether a cancellation names the same thing as a
//! renewal. Pure functions over [`Intent`]; writing is `crate::user::intents`'.

use engram_inference::distil::Priority;
use engram_storage::types::{Intent, PiiLevel, Timestamp};
use serde_json::Value;

use super::pii;

pub mod target;

/// Intent types whose latest versions the context and pre-warm serve.
pub const KEY_INTENT_TYPES: [&str; 4] = [
    "appointment",
    "complaint",
    "subscription_renewal",
    "subscription_cancel",
];

/// The target of a stored version as text: a string `target_value`, else the seed's
/// `business_intent.target`, else `target` (gateway-written fields), else a structured
/// `target_value`'s strings joined (its place, product or service, and so on); empty without
/// one. What the context shows and a cancellation is matched by.
pub fn target_of(intent: &Intent) -> String {
    let fields: Value = serde_json::from_str(&intent.fields).unwrap_or(Value::Null);
    let text = [
        fields.get("target_value"),
        fields.pointer("/business_intent/target"),
        fields.get("target"),
    ]
    .into_iter()
    .flatten()
    .find_map(Value::as_str)
    .filter(|t| !t.trim().is_empty());
    match (text, fields.get("target_value")) {
        (Some(text), _) => text.to_owned(),
        (None, Some(Value::Object(parts))) => parts
            .values()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        (None, _) => String::new(),
    }
}

/// The target of a stored version as the seed answers it (`/recall`'s `target_value`): the
/// stored `target_value` as it is, an object for the types with a structure
/// ([`target::structured`]) or whatever JSON a gateway wrote; else the text of
/// [`target_of`].
pub fn target_value_of(intent: &Intent) -> Value {
    let fields: Value = serde_json::from_str(&intent.fields).unwrap_or(Value::Null);
    match fields.get("target_value") {
        Some(value) if !value.is_null() && !value.is_string() => value.clone(),
        _ => Value::String(target_of(intent)),
    }
}

/// Whether a version is served at `now` (active, and its `expires_at`, if any, not passed).
pub fn is_current(intent: &Intent, now: Timestamp) -> bool {
    intent.active && intent.expires_at().is_none_or(|at| at > now)
}

/// Whether a cancellation's target names the same thing as a renewal's: either is empty,
/// one contains the other, or they share a word (Latin) or two adjacent characters (CJK).
pub fn target_matches(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim().to_lowercase(), b.trim().to_lowercase());
    if a.is_empty() || b.is_empty() || a.contains(&b) || b.contains(&a) {
        return true;
    }
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() >= 3 && w.is_ascii())
            .filter(|w| !matches!(*w, "the" | "and" | "for" | "you" | "your" | "plan"))
            .map(str::to_owned)
            .collect()
    };
    let pairs = |s: &str| -> Vec<String> {
        let cjk: Vec<char> = s.chars().filter(|c| !c.is_ascii()).collect();
        cjk.windows(2).map(|w| w.iter().collect()).collect()
    };
    let (wa, wb) = (words(&a), words(&b));
    let (pa, pb) = (pairs(&a), pairs(&b));
    wa.iter().any(|w| wb.contains(w)) || pa.iter().any(|p| pb.contains(p))
}

/// Priority spelled as the seed does.
pub fn priority_of(intent: &Intent) -> Option<Priority> {
    let fields: Value = serde_json::from_str(&intent.fields).ok()?;
    serde_json::from_value(fields.pointer("/decision_basis/priority")?.clone()).ok()
}

/// An intent's fields (JSON text) as a gateway may see them: identifiers masked in every
/// string, every object key and every number of the object, at any depth; a number that is
/// an identifier (`{"phone":13812345678}`) becomes its mask, a string. Other numbers and the
/// structure are left as they are (masking the text as a whole would read a 13-digit
/// timestamp as a card number and break the JSON). Text that is not JSON is masked whole.
pub fn masked_fields(fields: &str) -> String {
    match serde_json::from_str::<Value>(fields) {
        Ok(mut value) => {
            mask_value(&mut value);
            value.to_string()
        }
        Err(_) => pii::for_gateway(fields),
    }
}

fn mask_value(value: &mut Value) {
    match value {
        Value::String(s) => *s = pii::for_gateway(s),
        Value::Number(n) => {
            if let Some(masked) = pii::mask_number(&n.to_string()) {
                *value = Value::String(masked);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask_value),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut item) in entries {
                mask_value(&mut item);
                map.insert(pii::for_gateway(&key), item);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// The highest level of personal data in the strings, object keys and numbers of an
/// intent's fields.
pub fn fields_pii(fields: &str) -> PiiLevel {
    let mut strings = Vec::new();
    match serde_json::from_str::<Value>(fields) {
        Ok(value) => collect_strings(&value, &mut strings),
        Err(_) => strings.push(fields.to_owned()),
    }
    pii::level_of(strings.iter().map(String::as_str))
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => {
            let n = n.to_string();
            if pii::mask_number(&n).is_some() {
                out.push(n);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (key, v) in map {
                out.push(key.clone());
                collect_strings(v, out);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_fields_masks_identifiers_in_strings_and_keeps_numbers_and_json() {
        // 1767225600009 (a time in milliseconds) passes the card checksum: it must stay a
        // number.
        let fields = r#"{"target":"card 4111111111111111","expires_at":1767225600009,"n":[1]}"#;
        let masked: Value = serde_json::from_str(&masked_fields(fields)).expect("still JSON");
        assert_eq!(masked["expires_at"], 1_767_225_600_009_i64);
        assert_eq!(masked["n"], serde_json::json!([1]));
        assert!(
            !masked["target"]
                .as_str()
                .unwrap()
                .contains("4111111111111111")
        );
        assert_eq!(
            fields_pii(r#"{"expires_at":1767225600009}"#),
            PiiLevel::None
        );
        assert_eq!(fields_pii(fields), PiiLevel::High);
    }

    #[test]
    fn identifiers_in_numbers_and_object_keys_are_masked_at_any_depth() {
        let fields = r#"{"phone":13812345678,"a":{"b":[{"11010519491231002X":1},{"card":4111111111111111}]},"13912345678":"x","id":"110105 19491231 002X"}"#;
        let masked = masked_fields(fields);
        let value: Value = serde_json::from_str(&masked).expect("still JSON");
        assert_eq!(value["phone"], "*******5678");
        assert_eq!(value["a"]["b"][1]["card"], "************1111");
        assert_eq!(value["*******5678"], "x");
        for hidden in ["1381234", "1391234", "411111111111", "110105", "19491231"] {
            assert!(!masked.contains(hidden), "{hidden} in {masked}");
        }
        assert_eq!(fields_pii(r#"{"phone":13812345678}"#), PiiLevel::Medium);
        assert_eq!(fields_pii(r#"{"13812345678":true}"#), PiiLevel::Medium);
        assert_eq!(
            fields_pii(r#"{"x":[{"card":4111111111111111}]}"#),
            PiiLevel::High
        );
    }
}

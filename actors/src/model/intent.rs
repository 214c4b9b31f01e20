//! Distilled intents as the memory model reads them: what a version is about, how urgent,
//! whether it is still served, and whether a cancellation names the same thing as a
//! renewal. Pure functions over [`Intent`]; writing is `crate::user::intents`'.

use engram_inference::distil::Priority;
use engram_storage::model::{Intent, Timestamp};
use serde_json::Value;

/// Intent types whose latest versions the context and pre-warm serve.
pub const KEY_INTENT_TYPES: [&str; 4] = [
    "appointment",
    "complaint",
    "subscription_renewal",
    "subscription_cancel",
];

/// The target of a stored version: `target_value`, else the seed's
/// `business_intent.target`, else `target` (gateway-written fields); empty without one.
pub fn target_of(intent: &Intent) -> String {
    let fields: Value = serde_json::from_str(&intent.fields).unwrap_or(Value::Null);
    [
        fields.get("target_value"),
        fields.pointer("/business_intent/target"),
        fields.get("target"),
    ]
    .into_iter()
    .flatten()
    .find_map(Value::as_str)
    .unwrap_or_default()
    .to_owned()
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

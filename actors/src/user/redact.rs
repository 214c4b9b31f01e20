//! What a reader may see of a user's records and turns: admins see them in full; everyone
//! else sees personal data masked ([`gateway_text`]) and `reference_only` records withheld.
//! Applied by the user's actor to every reply before it leaves, so no path (local or
//! through a peer) can skip it.

use engram_storage::types::{MemoryRecord, RedactionLevel, Turn};

use crate::model::context::gateway_text;
use crate::request::Reader;

/// The text of a record whose redaction level withholds it from non-admins.
pub const WITHHELD: &str = "[withheld: personal data]";

/// `record` as `reader` may see it.
pub fn record(reader: &Reader, mut record: MemoryRecord) -> MemoryRecord {
    if reader.is_admin() {
        return record;
    }
    if record.redaction_level == RedactionLevel::ReferenceOnly {
        WITHHELD.clone_into(&mut record.summary_text);
        "null".clone_into(&mut record.payload);
    } else {
        record.summary_text = gateway_text(&record.summary_text);
        record.payload = gateway_text(&record.payload);
    }
    record
}

/// Text derived from the user's turns (a summary) as `reader` may see it.
pub fn text(reader: &Reader, text: String) -> String {
    if reader.is_admin() {
        text
    } else {
        gateway_text(&text)
    }
}

/// `turn` as `reader` may see it.
pub fn turn(reader: &Reader, mut turn: Turn) -> Turn {
    if !reader.is_admin() {
        turn.user_text = gateway_text(&turn.user_text);
        turn.assistant_text = gateway_text(&turn.assistant_text);
    }
    turn
}

//! Decoding constrained by a JSON schema: a byte-level matcher of the JSON texts a schema
//! allows, so that a decoder picks at each step only a token that keeps its output a valid
//! prefix (and, once the object is closed, only the end of sequence). An output that does
//! not match the schema cannot be produced.
//!
//! The schemas are the distiller's: an object whose properties are all required, each a
//! string (with an optional `minLength` and `maxLength` in characters; a maximum bounds how
//! long a decoder can run), a string from an `enum`, a `number`, an `integer` or a `boolean`. The allowed
//! texts are the compact layout `{"a": 1, "b": "x"}` (one space after each colon and comma),
//! the properties in the order `required` lists them (every property must be listed there),
//! or by name without it: every one is valid JSON and valid under the schema.

use serde_json::Value;

/// The type of one property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// Any JSON string, of at least `min` characters and at most `max` when bounded.
    String {
        /// Fewest characters.
        min: usize,
        /// Most characters, when bounded.
        max: Option<usize>,
    },
    /// One of these strings.
    Enum(Vec<String>),
    /// A JSON number with an optional fraction (`-?[0-9]+(\.[0-9]+)?`).
    Number,
    /// A JSON integer (`-?[0-9]+`).
    Integer,
    /// `true` or `false`.
    Boolean,
}

/// An object schema: its properties, in order, all required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    properties: Vec<(String, Field)>,
}

impl Schema {
    /// Reads a JSON schema of the supported subset, or says what it does not support.
    pub fn from_json(schema: &Value) -> Result<Schema, String> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("the schema must be an object schema".into());
        }
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .ok_or("the schema has no properties")?;
        let mut fields = Vec::new();
        for (name, property) in properties {
            let field = if let Some(options) = property.get("enum") {
                let options = options
                    .as_array()
                    .ok_or(format!("{name}: enum is not an array"))?
                    .iter()
                    .map(|o| o.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(format!("{name}: only string enums are supported"))?;
                if options.is_empty() {
                    return Err(format!("{name}: an empty enum"));
                }
                Field::Enum(options)
            } else {
                match property.get("type").and_then(Value::as_str) {
                    Some("string") => {
                        let count = |key: &str| {
                            property
                                .get(key)
                                .map(|m| {
                                    m.as_u64()
                                        .and_then(|m| usize::try_from(m).ok())
                                        .ok_or(format!("{name}: {key} is not a count"))
                                })
                                .transpose()
                        };
                        let (min, max) = (count("minLength")?.unwrap_or(0), count("maxLength")?);
                        if max.is_some_and(|max| max < min) {
                            return Err(format!("{name}: maxLength is below minLength"));
                        }
                        Field::String { min, max }
                    }
                    Some("number") => Field::Number,
                    Some("integer") => Field::Integer,
                    Some("boolean") => Field::Boolean,
                    other => return Err(format!("{name}: type {other:?} is not supported")),
                }
            };
            fields.push((name.clone(), field));
        }
        if fields.is_empty() {
            return Err("the schema has no properties".into());
        }
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            let order: Vec<&str> = required.iter().filter_map(Value::as_str).collect();
            if order.len() != fields.len()
                || fields.iter().any(|(n, _)| !order.contains(&n.as_str()))
            {
                return Err("every property must be required, each once".into());
            }
            fields.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
        }
        Ok(Schema { properties: fields })
    }

    /// A matcher at the start of the output.
    pub fn matcher(&self) -> Matcher {
        let mut segments = Vec::new();
        for (i, (name, field)) in self.properties.iter().enumerate() {
            let open = if i == 0 { "{" } else { ", " };
            let key = serde_json::to_string(name).unwrap_or_default();
            segments.push(Segment::Literal(format!("{open}{key}: ").into_bytes()));
            segments.push(Segment::Value(field.clone()));
        }
        segments.push(Segment::Literal(b"}".to_vec()));
        Matcher {
            segments: segments.into(),
            at: 0,
            state: State::Start,
        }
    }
}

#[derive(Debug, Clone)]
enum Segment {
    Literal(Vec<u8>),
    Value(Field),
}

/// Where the matcher is inside the current segment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// At the segment's first byte.
    Start,
    /// `n` bytes into a literal.
    Literal(usize),
    /// Inside a string.
    Str(Text),
    /// `n` bytes into the quoted options that still match.
    Options { n: usize, live: Vec<usize> },
    /// In a number: digits seen before and after the point, whether a point was seen, and
    /// whether the integer part is a leading zero (JSON allows no digit after it).
    Num {
        int: usize,
        point: bool,
        frac: usize,
        zero: bool,
    },
}

/// Where the matcher is inside a JSON string: escapes, and UTF-8 sequences, which must be
/// well formed (the output is parsed as UTF-8 JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Text {
    /// After a backslash.
    escape: bool,
    /// Hex digits of a `\u` escape still due, and the code point so far.
    hex: u8,
    code: u32,
    /// Continuation bytes of a UTF-8 sequence still due, and the range of the next one.
    cont: u8,
    lo: u8,
    hi: u8,
    /// Characters so far (an escape or a multi-byte character counts once).
    chars: usize,
}

impl Text {
    /// Takes byte `b` of the string: `Some(true)` when it closes the string, `Some(false)`
    /// when the string goes on, `None` when it cannot be part of a valid string.
    fn byte(&mut self, b: u8) -> Option<bool> {
        if self.cont > 0 {
            if !(self.lo..=self.hi).contains(&b) {
                return None;
            }
            self.cont -= 1;
            (self.lo, self.hi) = (0x80, 0xbf);
            return Some(false);
        }
        if self.hex > 0 {
            let digit = char::from(b).to_digit(16)?;
            self.code = self.code * 16 + digit;
            self.hex -= 1;
            // Surrogates (`\ud800` to `\udfff`) need a pair; the model writes the character
            // itself instead. Refused at their second digit, so no escape can dead-end.
            return (self.hex != 2 || !(0xd8..=0xdf).contains(&self.code)).then_some(false);
        }
        if self.escape {
            self.escape = false;
            if b == b'u' {
                (self.hex, self.code) = (4, 0);
            }
            return matches!(
                b,
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u'
            )
            .then_some(false);
        }
        if b == b'"' {
            return Some(true);
        }
        self.chars += 1;
        let (cont, lo, hi) = match b {
            b'\\' => {
                self.escape = true;
                return Some(false);
            }
            0x00..=0x1f => return None,
            0x20..=0x7f => return Some(false),
            0xc2..=0xdf => (1, 0x80, 0xbf),
            0xe0 => (2, 0xa0, 0xbf),
            0xe1..=0xec | 0xee..=0xef => (2, 0x80, 0xbf),
            0xed => (2, 0x80, 0x9f),
            0xf0 => (3, 0x90, 0xbf),
            0xf1..=0xf3 => (3, 0x80, 0xbf),
            0xf4 => (3, 0x80, 0x8f),
            0x80..=0xc1 | 0xf5..=0xff => return None,
        };
        (self.cont, self.lo, self.hi) = (cont, lo, hi);
        Some(false)
    }
}

/// The state of an output being matched against a schema. Cheap to clone: a decoder tries a
/// token on a clone.
#[derive(Debug, Clone)]
pub struct Matcher {
    segments: std::sync::Arc<[Segment]>,
    at: usize,
    state: State,
}

impl Matcher {
    /// Whether the output is a whole object (only the end of sequence may follow).
    pub fn is_complete(&self) -> bool {
        self.at == self.segments.len()
    }

    /// Feeds `bytes`; false (the matcher then is unusable) when they make the output leave
    /// what the schema allows.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.byte(b))
    }

    fn next_segment(&mut self) {
        self.at += 1;
        self.state = State::Start;
    }

    fn byte(&mut self, b: u8) -> bool {
        let Some(segment) = self.segments.get(self.at).cloned() else {
            return false;
        };
        match segment {
            Segment::Literal(text) => {
                let n = if let State::Literal(n) = self.state {
                    n
                } else {
                    0
                };
                if text.get(n) != Some(&b) {
                    return false;
                }
                if n + 1 == text.len() {
                    self.next_segment();
                } else {
                    self.state = State::Literal(n + 1);
                }
                true
            }
            Segment::Value(field) => self.value_byte(&field, b),
        }
    }

    fn value_byte(&mut self, field: &Field, b: u8) -> bool {
        match (field, self.state.clone()) {
            (Field::String { .. }, State::Start) => {
                self.state = State::Str(Text::default());
                b == b'"'
            }
            (Field::String { min, max }, State::Str(mut text)) => match text.byte(b) {
                None => false,
                // A character past the bound: only the closing quote may follow it.
                Some(false) if max.is_some_and(|max| text.chars > max) => false,
                // Closed too short.
                Some(true) if text.chars < *min => false,
                Some(true) => {
                    self.next_segment();
                    true
                }
                Some(false) => {
                    self.state = State::Str(text);
                    true
                }
            },
            (Field::Enum(options), State::Start) => self.options(
                &options.iter().map(|o| quoted(o)).collect::<Vec<_>>(),
                0,
                None,
                b,
            ),
            (Field::Boolean, State::Start) => {
                self.options(&[b"true".to_vec(), b"false".to_vec()], 0, None, b)
            }
            (Field::Enum(options), State::Options { n, live }) => self.options(
                &options.iter().map(|o| quoted(o)).collect::<Vec<_>>(),
                n,
                Some(live),
                b,
            ),
            (Field::Boolean, State::Options { n, live }) => {
                self.options(&[b"true".to_vec(), b"false".to_vec()], n, Some(live), b)
            }
            (Field::Number | Field::Integer, State::Start) => {
                if b == b'-' {
                    self.state = State::Num {
                        int: 0,
                        point: false,
                        frac: 0,
                        zero: false,
                    };
                    true
                } else if b.is_ascii_digit() {
                    self.state = State::Num {
                        int: 1,
                        point: false,
                        frac: 0,
                        zero: b == b'0',
                    };
                    true
                } else {
                    false
                }
            }
            (
                Field::Number | Field::Integer,
                State::Num {
                    int,
                    point,
                    frac,
                    zero,
                },
            ) => {
                if b.is_ascii_digit() && point {
                    self.state = State::Num {
                        int,
                        point,
                        frac: frac + 1,
                        zero,
                    };
                    true
                } else if b.is_ascii_digit() && !zero {
                    self.state = State::Num {
                        int: int + 1,
                        point,
                        frac,
                        zero: int == 0 && b == b'0',
                    };
                    true
                } else if b.is_ascii_digit() {
                    false
                } else if b == b'.' && *field == Field::Number && !point && int > 0 {
                    self.state = State::Num {
                        int,
                        point: true,
                        frac: 0,
                        zero,
                    };
                    true
                } else if int > 0 && (!point || frac > 0) {
                    // The number ended: the byte belongs to what follows.
                    self.next_segment();
                    self.byte(b)
                } else {
                    false
                }
            }
            _ignored => false,
        }
    }

    /// Matches byte `n` of the options still `live` (all at first).
    fn options(&mut self, options: &[Vec<u8>], n: usize, live: Option<Vec<usize>>, b: u8) -> bool {
        let live: Vec<usize> = live
            .unwrap_or_else(|| (0..options.len()).collect())
            .into_iter()
            .filter(|&i| options[i].get(n) == Some(&b))
            .collect();
        if live.is_empty() {
            return false;
        }
        if live.iter().any(|&i| options[i].len() == n + 1) {
            // Quoted options end at their closing quote, and true/false differ at once:
            // a whole option is never the prefix of another.
            self.next_segment();
        } else {
            self.state = State::Options { n: n + 1, live };
        }
        true
    }
}

/// The first token of `order` (token ids, most likely first) whose bytes in `vocab` keep
/// `matcher`'s output a valid prefix, with the matcher after it. Ids without bytes (special
/// tokens) are never picked. `None` when no token fits (cannot happen with a byte-level
/// vocabulary, which spells every byte).
pub fn pick<'v>(
    matcher: &Matcher,
    order: impl IntoIterator<Item = usize>,
    vocab: &'v [Option<Vec<u8>>],
) -> Option<(usize, Matcher, &'v [u8])> {
    order.into_iter().find_map(|id| {
        let bytes = vocab.get(id)?.as_deref()?;
        let mut tried = matcher.clone();
        tried.feed(bytes).then_some((id, tried, bytes))
    })
}

fn quoted(option: &str) -> Vec<u8> {
    serde_json::to_string(option)
        .unwrap_or_default()
        .into_bytes()
}

#[cfg(test)]
mod tests;

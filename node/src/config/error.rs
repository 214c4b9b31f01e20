//! [`ConfigError`]: why a configuration could not be loaded or does not make sense, in words
//! an operator can act on (which key, in which section, from which file or variable).
//!
//! Every variant is the operator's fault: the node refuses to start and says what to fix.

use std::fmt;
use std::path::PathBuf;

use figment::error::Kind;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file does not exist or cannot be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// A key that no section has: a typo, or a setting of another version.
    #[error("unknown key `{key}` in {section} (from {origin}); expected one of: {expected}")]
    UnknownKey {
        /// The unknown key, as written.
        key: String,
        /// The section it appeared in (`[http]`, `[storage.sqlite]`, or the top level).
        section: String,
        /// Where it came from: the file or the environment.
        origin: String,
        /// The keys that section accepts.
        expected: String,
    },

    /// The file is not valid TOML, or a value has the wrong type or format.
    #[error("{0}")]
    Parse(String),

    /// Values that parse but do not make sense, alone or together.
    #[error("invalid configuration:{}", Problems(.0))]
    Invalid(Vec<Problem>),
}

/// One thing wrong with a configuration: the key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key, as `section.key` (`cluster.lease-timeout`).
    pub key: std::borrow::Cow<'static, str>,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for problem in self.0 {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// Maps figment's error, naming the key, section and origin of an unknown key.
    pub(super) fn from_figment(err: &figment::Error) -> ConfigError {
        let Kind::UnknownField(key, expected) = &err.kind else {
            return ConfigError::Parse(err.to_string());
        };
        // The path ends with the unknown key itself; the rest names its section.
        let mut path = err.path.as_slice();
        if let Some((last, rest)) = path.split_last()
            && last == key
        {
            path = rest;
        }
        let section = match path {
            [] => "the top level".to_owned(),
            path => format!("[{}]", path.join(".")),
        };
        let origin = match &err.metadata {
            Some(md) => match &md.source {
                Some(source) => source.to_string(),
                // The environment provider has no source; name the variable it read.
                None if md.name.contains(super::ENV_PREFIX) => {
                    let name = err.path.join("__").replace('-', "_").to_ascii_uppercase();
                    format!("environment variable {}{name}", super::ENV_PREFIX)
                }
                None => md.name.to_string(),
            },
            None => "unknown source".to_owned(),
        };
        let expected = match expected.len() {
            0 => "none".to_owned(),
            _ => expected.join(", "),
        };
        ConfigError::UnknownKey {
            key: key.clone(),
            section,
            origin,
            expected,
        }
    }
}

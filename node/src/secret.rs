//! Reading the secrets that the configuration names by path: the cluster cookie, the root
//! admin key, the master keys of encryption at rest and the TLS private keys.
//!
//! A secret file must be readable by its owner only, as ssh requires of private keys: one
//! that group or others may read or write is refused, and the error names the setting, the
//! path and the mode (`chmod 600` fixes it). There is no fallback secret: a node without its
//! cookie file does not start. The contents never reach a log line or an error message.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::config::ADMIN_KEY_ENV;
use crate::config::Config;
use crate::error::{Error, Result};

/// The fewest characters a cookie may have.
pub const MIN_COOKIE_LEN: usize = 16;
/// The fewest characters the configured (root) admin key may have.
pub const MIN_ADMIN_KEY_LEN: usize = 32;

/// The bytes of the secret file `path`, named by setting `key`.
///
/// # Errors
/// [`Error::File`] when the file cannot be read, is not a regular file, or group or others
/// have any permission on it.
pub fn read(key: &'static str, path: &Path) -> Result<Vec<u8>> {
    let fail = |reason: String| Error::File {
        key,
        path: path.to_owned(),
        reason,
    };
    let mut file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    // The handle's metadata, not the path's: the file checked is the file read.
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(fail("is not a regular file".to_owned()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(fail(format!(
            "holds a secret but its mode is {mode:04o}, open to group or others; \
             restrict it with `chmod 600`"
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    Ok(bytes)
}

/// The root admin key, from `ENGRAM_ADMIN_KEY` or else `security.admin-key-file` (a secret
/// file: owner-only, as [`read`] requires), at least [`MIN_ADMIN_KEY_LEN`] characters without
/// spaces.
///
/// # Errors
/// As [`read`], and [`Error::Secret`] when there is no key or it is too short.
pub fn admin_key(config: &Config) -> Result<String> {
    const KEY: &str = "security.admin-key-file";
    let key = match (
        std::env::var(ADMIN_KEY_ENV),
        &config.security.admin_key_file,
    ) {
        (Ok(key), _) => key,
        (Err(_), Some(path)) => String::from_utf8(read(KEY, path)?).map_err(|_| Error::File {
            key: KEY,
            path: path.clone(),
            reason: "is not UTF-8 text".to_owned(),
        })?,
        (Err(_), None) => {
            return Err(Error::Secret(format!(
                "no admin key: set {KEY} or {ADMIN_KEY_ENV} (a secret of at least {} \
                 characters, e.g. `openssl rand -hex 32`)",
                MIN_ADMIN_KEY_LEN
            )));
        }
    };
    let key = key.trim().to_owned();
    if key.len() < MIN_ADMIN_KEY_LEN || key.chars().any(char::is_whitespace) {
        return Err(Error::Secret(format!(
            "the admin key must be at least {} characters without spaces",
            MIN_ADMIN_KEY_LEN
        )));
    }
    Ok(key)
}

/// The master keys of encryption at rest, from `security.master-key-file` (a secret file:
/// owner-only, as [`read`] requires).
///
/// # Errors
/// As [`read`], and [`Error::Storage`] when the file does not hold master keys.
pub fn master_keys(path: &Path) -> Result<engram_storage::crypto::MasterKeys> {
    const KEY: &str = "security.master-key-file";
    let bytes = zeroize::Zeroizing::new(read(KEY, path)?);
    let text = std::str::from_utf8(&bytes).map_err(|_| Error::File {
        key: KEY,
        path: path.to_owned(),
        reason: "is not UTF-8 text".to_owned(),
    })?;
    engram_storage::crypto::MasterKeys::from_text(text, path)
        .map_err(Error::storage("loading security.master-key-file"))
}

/// The cluster's shared secret: the contents of `cluster.cookie-file` without surrounding
/// whitespace, at least [`MIN_COOKIE_LEN`] characters.
///
/// # Errors
/// As [`read`], and when the cookie is not UTF-8 or too short.
pub fn cookie(config: &Config) -> Result<String> {
    const KEY: &str = "cluster.cookie-file";
    let path = config.file(&config.cluster.cookie_file);
    let fail = |reason: String| Error::File {
        key: KEY,
        path: path.clone(),
        reason,
    };
    let bytes = read(KEY, &path)?;
    let text = String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text".to_owned()))?;
    let cookie = text.trim();
    let len = cookie.chars().count();
    if len < MIN_COOKIE_LEN {
        return Err(fail(format!(
            "holds a {len}-character cookie; write at least {MIN_COOKIE_LEN} random \
             characters, e.g. `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`"
        )));
    }
    Ok(cookie.to_owned())
}

#[cfg(test)]
mod tests;

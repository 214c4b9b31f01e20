//! What the owner of a user checks of a request a peer forwards: the peer presents a reader
//! (key id, scope, tenant) and the client's own bearer token; the owner authenticates the
//! token against its own key store (and its own configured admin key) and serves the request
//! only when the token is that reader's ([`forwarded_caller_allowed`]). A peer holding the
//! cluster cookie can therefore act only for callers whose tokens it was given, never invent
//! one, and a revoked key stops at the owner too.

use std::sync::Arc;

use engram_actors::clock::SharedClock;
use engram_actors::front::{CallerCheck, CheckFuture, Credential, Reader};

use super::{Authenticator, Checked, Denied};

/// The client address that the owner's key lookups of forwarded tokens are counted under.
const PEERS: &str = "peers";

/// Whether a forwarded request may act as `reader`, given what the owner found its token to
/// be (`checked`): the same key (or the root), the same scope, and, for a tenant's key, the
/// key's own tenant; the root may name any valid tenant. `Err` says what did not match,
/// without any value.
pub fn forwarded_caller_allowed(checked: &Checked, reader: &Reader) -> Result<(), String> {
    if checked.principal != reader.principal {
        return Err("the credential is another key's".to_owned());
    }
    if checked.scope != reader.scope {
        return Err(format!(
            "the key's scope is {}, not {}",
            checked.scope.as_str(),
            reader.scope.as_str()
        ));
    }
    match &checked.tenant {
        Some(tenant) if *tenant != reader.tenant => {
            Err("the key acts for another tenant".to_owned())
        }
        Some(_) => Ok(()),
        None => engram_actors::user::check_id("tenant", &reader.tenant)
            .map_err(|_| "the tenant is not a valid id".to_owned()),
    }
}

/// The node's [`CallerCheck`]: authenticates a forwarded token with the node's own
/// [`Authenticator`] and compares it with the reader ([`forwarded_caller_allowed`]).
pub struct PeerCallers {
    auth: Arc<Authenticator>,
    clock: SharedClock,
}

impl PeerCallers {
    /// Checks forwarded callers against `auth`, at the time `clock` gives.
    pub fn new(auth: Arc<Authenticator>, clock: SharedClock) -> Self {
        PeerCallers { auth, clock }
    }
}

impl std::fmt::Debug for PeerCallers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCallers").finish_non_exhaustive()
    }
}

impl CallerCheck for PeerCallers {
    fn check<'a>(
        &'a self,
        reader: &'a Reader,
        credential: Option<&'a Credential>,
    ) -> CheckFuture<'a> {
        Box::pin(async move {
            let Some(credential) = credential else {
                return Err("no credential came with it".to_owned());
            };
            let checked = self
                .auth
                .check(credential.token(), self.clock.now(), PEERS)
                .await
                .map_err(|denied| match denied {
                    Denied::Invalid => "the key is unknown, revoked or expired".to_owned(),
                    Denied::Limited(_) => "too many unknown keys were forwarded".to_owned(),
                })?;
            forwarded_caller_allowed(&checked, reader)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use engram_actors::clock::SystemClock;
    use engram_actors::directory::Directory;
    use engram_actors::front::{Fault, UserReply, Users, decode_reply, encode_call};
    use engram_actors::model::entities::EntityExtractor;
    use engram_actors::placement::UserKey;
    use engram_actors::request::user::ListSessions;
    use engram_actors::services::{Metrics, Services, Settings};
    use engram_storage::access::{ApiKey, Scope};
    use engram_storage::sqlite::SqliteOptions;
    use engram_storage::types::Timestamp;
    use engram_storage::{Keyspace, Store};

    use super::*;
    use crate::auth::{RateLimiter, hash_secret};
    use crate::config::LookupLimits;

    const ROOT: &str = "root-key-of-the-peer-tests-0123456789abcdef";
    const ACME_GATEWAY: &str = "egk_00000000000000a1_acme-gateway-secret";
    const EXPIRED: &str = "egk_00000000000000a2_expired-secret";

    fn row(token: &str, tenant: &str, scope: Scope, expires_at: Option<Timestamp>) -> ApiKey {
        let (id, secret) = crate::auth::parse_token(token).unwrap();
        ApiKey {
            id: id.into(),
            tenant: tenant.into(),
            scope,
            name: "peer-tests".into(),
            secret_hash: hash_secret(secret),
            created_at: Timestamp(0),
            created_by: "root".into(),
            expires_at,
            replaced_by: None,
        }
    }

    /// A node's front door over an SQLite file in `dir`, checking peers' callers against its
    /// key store as a node does.
    async fn owner(dir: &tempfile::TempDir) -> Users {
        let store =
            Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
        let keyspace = Keyspace::new("engram");
        let keys = [
            row(ACME_GATEWAY, "acme", Scope::Gateway, None),
            row(EXPIRED, "acme", Scope::Admin, Some(Timestamp(1))),
        ];
        let ks = keyspace.clone();
        store
            .run(move |txn| {
                for key in &keys {
                    engram_storage::access::put_api_key(txn, &ks, key)?;
                }
                Ok(())
            })
            .await
            .unwrap();
        let auth = Arc::new(Authenticator::new(
            store.clone(),
            keyspace.clone(),
            Some(ROOT),
            RateLimiter::new(0, 0),
            LookupLimits::default(),
        ));
        let services = Services {
            store,
            keyspace,
            clock: Arc::new(SystemClock),
            extractor: Arc::new(EntityExtractor::default()),
            embedder: None,
            pipeline: None,
            distillation: None,
            reranker: None,
            ownership: None,
            settings: Settings::default(),
            metrics: Arc::new(Metrics::default()),
        };
        let clock = Arc::clone(&services.clock);
        let users = Users::new(Directory::new(services), None, Duration::from_secs(1));
        users.check_peer_callers(Arc::new(PeerCallers::new(auth, clock)));
        users
    }

    fn key(principal: &str, scope: Scope, tenant: Option<&str>) -> Checked {
        Checked {
            principal: principal.to_owned(),
            tenant: tenant.map(str::to_owned),
            scope,
            operates_cluster: false,
        }
    }

    fn reader(principal: &str, scope: Scope, tenant: &str) -> Reader {
        Reader {
            principal: principal.to_owned(),
            scope,
            tenant: tenant.to_owned(),
        }
    }

    #[test]
    fn a_forwarded_reader_must_be_what_its_token_proves() {
        let gateway = key("0a", Scope::Gateway, Some("acme"));
        assert_eq!(
            forwarded_caller_allowed(&gateway, &reader("0a", Scope::Gateway, "acme")),
            Ok(())
        );
        // A peer raising the scope, changing the tenant or naming another key is refused.
        for claimed in [
            reader("0a", Scope::Admin, "acme"),
            reader("0a", Scope::Gateway, "globex"),
            reader("0b", Scope::Gateway, "acme"),
            reader("root", Scope::Admin, "acme"),
        ] {
            assert!(
                forwarded_caller_allowed(&gateway, &claimed).is_err(),
                "{claimed:?}"
            );
        }
        // The root acts for any tenant with a valid id.
        let root = key("root", Scope::Admin, None);
        assert_eq!(
            forwarded_caller_allowed(&root, &reader("root", Scope::Admin, "globex")),
            Ok(())
        );
        assert!(forwarded_caller_allowed(&root, &reader("root", Scope::Admin, "no/such")).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_serves_a_peers_request_only_for_the_caller_its_token_proves() {
        let dir = tempfile::tempdir().unwrap();
        let users = owner(&dir).await;
        let alice = UserKey::new("acme", "alice");
        let of_globex = UserKey::new("globex", "bob");
        let gateway = Credential::new(ACME_GATEWAY);
        let root = Credential::new(ROOT);
        let expired = Credential::new(EXPIRED);
        let ask = |reader: Reader, credential: Option<&Credential>, user: &UserKey| {
            let frame = encode_call(&reader, credential, user, &ListSessions.into());
            let users = &users;
            async move { decode_reply(&users.serve_peer(&frame).await).unwrap() }
        };
        // Envelopes a peer could make up, each refused before the user's actor is asked.
        let refused = [
            (
                reader("00000000000000a1", Scope::Admin, "acme"),
                Some(&gateway),
                &alice,
            ),
            (
                reader("00000000000000a1", Scope::Gateway, "globex"),
                Some(&gateway),
                &of_globex,
            ),
            (
                reader("root", Scope::Admin, "globex"),
                Some(&gateway),
                &of_globex,
            ),
            (
                reader("00000000000000ff", Scope::Admin, "acme"),
                Some(&gateway),
                &alice,
            ),
            (
                reader("00000000000000a2", Scope::Admin, "acme"),
                Some(&expired),
                &alice,
            ),
            (reader("root", Scope::Admin, "globex"), None, &of_globex),
        ];
        for (claimed, credential, user) in refused {
            match ask(claimed.clone(), credential, user).await {
                Err(Fault::Forbidden(why)) => {
                    assert!(why.contains("forwarded caller"), "{claimed:?}: {why}");
                    assert!(!why.contains("secret"), "{why}");
                }
                other => panic!("{claimed:?} was not refused: {other:?}"),
            }
        }
        assert_eq!(
            users
                .metrics
                .refused_callers
                .load(std::sync::atomic::Ordering::Relaxed),
            6
        );
        assert_eq!(
            users
                .metrics
                .served_for_peers
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // The callers the tokens prove are served.
        let served = [
            (
                reader("00000000000000a1", Scope::Gateway, "acme"),
                Some(&gateway),
                &alice,
            ),
            (
                reader("root", Scope::Admin, "globex"),
                Some(&root),
                &of_globex,
            ),
        ];
        for (claimed, credential, user) in served {
            match ask(claimed.clone(), credential, user).await {
                Ok(UserReply::ListSessions(_)) => {}
                other => panic!("{claimed:?} was not served: {other:?}"),
            }
        }
    }
}

//! A tenant's users, paged by a skip scan of their key prefixes.

use super::*;
use crate::data::users::{UsersPage, page};

#[test]
fn a_tenants_users_are_paged_in_key_order_by_a_skip_scan_and_forgotten_ones_vanish() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    // One id prefixes others ("al", "alice", "alicia"); alice holds many keys, which the
    // scan steps over in one read.
    let all = ["al", "alice", "alicia", "bob", "carol", "dave", "zoe"];
    for user in all {
        let turns = if user == "alice" { 40 } else { 1 };
        for i in 0..turns {
            with_user(&store, &ks, user, |u| {
                u.append_turn(&mut turn("s1", &format!("t{i}"), i), RULE)
            });
        }
        with_user(&store, &ks, user, |u| {
            u.put_record(&MemoryRecord {
                user_id: user.into(),
                ..record("m1", MemoryKind::Profile, Some(100))
            })
        });
    }
    // Other tenants, one whose name the listed tenant's prefixes, and keys outside "u".
    for (tenant, user) in [("acme-2", "eve"), ("acm", "mallory"), ("zeta", "bob")] {
        store
            .run_blocking(|txn| {
                UserData::new(txn, &ks, tenant, user).append_turn(&mut turn("s", "x", 1), RULE)
            })
            .unwrap();
    }
    let list = |tenant: &str, after: Option<&str>, limit: usize| {
        store
            .read_blocking(|txn| page(txn, &ks, tenant, after, limit))
            .unwrap()
    };
    let owned = |users: &[&str]| users.iter().map(|u| (*u).to_owned()).collect::<Vec<_>>();

    assert_eq!(
        list("acme", None, 100),
        UsersPage {
            users: owned(&all),
            next: None
        }
    );
    // Pages of 3 follow their cursors to the same list; the last page has no cursor.
    let (mut after, mut seen, mut pages) = (None::<String>, Vec::new(), 0);
    loop {
        let p = list("acme", after.as_deref(), 3);
        pages += 1;
        assert!(p.users.len() <= 3 && !p.users.is_empty(), "{p:?}");
        seen.extend(p.users.iter().cloned());
        match p.next {
            Some(next) => {
                assert_eq!(
                    Some(&next),
                    p.users.last(),
                    "the cursor is the page's last id"
                );
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!((seen, pages), (owned(&all), 3));
    // A page that ends exactly at the last user says so; one user short has a cursor.
    assert_eq!(list("acme", None, 7).next, None);
    assert_eq!(list("acme", None, 6).next.as_deref(), Some("dave"));
    assert_eq!(list("acme", None, 1).users, owned(&["al"]));
    // A cursor need not be a user: the page starts at the next id.
    assert_eq!(list("acme", Some("b"), 2).users, owned(&["bob", "carol"]));
    assert_eq!(
        list("acme", Some("al"), 2).users,
        owned(&["alice", "alicia"])
    );
    assert_eq!(
        list("acme", Some("zoe"), 5),
        UsersPage {
            users: vec![],
            next: None
        }
    );
    // Other tenants list their own users only.
    assert_eq!(list("acme-2", None, 10).users, owned(&["eve"]));
    assert_eq!(list("zeta", None, 10).users, owned(&["bob"]));
    assert_eq!(
        list("nobody", None, 10),
        UsersPage {
            users: vec![],
            next: None
        }
    );

    // A forgotten user is gone from every page.
    with_user(&store, &ks, "alice", |u| u.forget());
    let left = owned(&["al", "alicia", "bob", "carol", "dave", "zoe"]);
    assert_eq!(list("acme", None, 100).users, left);
    assert_eq!(list("acme", Some("al"), 1).users, owned(&["alicia"]));

    // Keys of any shape under a user's prefix name their user; others name none.
    let keys = ks.user("acme", "bob");
    for key in [
        keys.header(),
        keys.turn("s1", 3),
        keys.flag("f1"),
        keys.data_key(),
    ] {
        assert_eq!(
            ks.parse_user_key(&key),
            Some(("acme".to_owned(), "bob".to_owned()))
        );
    }
    assert_eq!(ks.parse_user_key(&ks.node("n1")), None);
    assert_eq!(ks.parse_user_key(&ks.api_key("k1")), None);
}

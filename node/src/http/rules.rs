//! The access rules of the gateway's routes: what a route needs and the action its audit
//! entries record ([`Rule`]), by route template and method ([`Rules`]). The route table
//! ([`super::table`]) writes them (`Rules::of`); the authentication middleware
//! ([`super::middleware::auth`]) looks up the rule of the route a request matched. It sits
//! below both, so the middleware need not import the table that layers it.

use std::collections::HashMap;

use axum::http::Method;

use crate::auth::Access;

/// What a route needs, and the action its audit entries record (`None`: not audited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The keys that may use it.
    pub access: Access,
    /// The action of its audit entries; every route but the public ones is audited.
    pub action: Option<&'static str>,
}

/// The rules of the table's routes, by route template and method: what authentication
/// looks up for the route a request matched.
#[derive(Debug, Default)]
pub struct Rules(HashMap<String, Vec<(Method, Rule)>>);

impl Rules {
    /// Adds the rule of `method` on the route template `path`.
    pub(super) fn insert(&mut self, method: Method, path: &str, rule: Rule) {
        self.0
            .entry(path.to_owned())
            .or_default()
            .push((method, rule));
    }

    /// The rule of `method` on the route template `route`; `None` for a route without one,
    /// which is then refused.
    pub fn get(&self, method: &Method, route: &str) -> Option<Rule> {
        self.0
            .get(route)?
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, rule)| *rule)
    }
}

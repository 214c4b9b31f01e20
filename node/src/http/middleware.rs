//! The gateway's axum middleware, one module each: request metrics ([`metrics`]),
//! authentication and authorisation ([`auth`]) and the audit trail ([`audit`]). Which routes
//! each one wraps is decided by the route table ([`super::table`]); what keys are and how
//! entries are written live in [`crate::auth`] and [`crate::audit`], which know no HTTP.

pub mod audit;
pub mod auth;
pub mod metrics;

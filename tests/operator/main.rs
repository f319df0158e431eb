//! Operator tests: the controller in process against a real kube-apiserver (see `support`),
//! plus a few mock-API tests (`mock`) for failures a real server cannot produce on demand.
//! A separate test binary, so the pooler's `it` binary links no Kubernetes crates.

mod admin_token;
mod budget;
mod cloudnativepg;
mod conditions;
mod mock;
mod namespaced;
mod peers;
mod process;
mod production;
mod rbac;
mod reconcile;
mod schema;
mod security;
mod support;

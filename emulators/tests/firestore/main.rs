//! Firestore emulator tests, with the real `firestore` client crate and raw
//! tonic clients against an emulator per test (ephemeral loopback port).
//!
//! - `documents`: CRUD, preconditions, transforms, validation.
//! - `queries`: queries and aggregations.
//! - `transactions`: pessimistic locking, expiry, read-only transactions.
//! - `faults`: injected faults seen from the client side.
//! - `limits`: Google's documented limits, crossed by one byte or level.
//! - `admin`: stats and reset routes.
//! - `numeric_ids`: numeric document ids `__id<int64>__` and their order.
//! - `listen`: the Listen RPC (targets, changes, resume, filters).
//! - `node_client`: Google's Node client watching many documents and
//!   queries while it writes (needs `npm ci --prefix emulators/tests/node`).

mod admin;
mod documents;
mod faults;
mod limits;
mod listen;
mod node_client;
mod numeric_ids;
mod queries;
mod support;
mod transactions;

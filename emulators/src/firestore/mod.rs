//! The Firestore emulator (stub: to be filled in).
use std::sync::Arc;

use crate::server::Context;

/// Firestore behaviour settings.
#[derive(Clone, Debug, Default)]
pub struct FirestoreConfig {}

/// The Firestore emulator's state; a cheap cloneable handle.
#[derive(Clone)]
pub struct Firestore {
    ctx: Arc<Context>,
}

impl Firestore {
    /// A new, empty emulator.
    pub fn new(ctx: Arc<Context>, _config: FirestoreConfig) -> Self {
        Self { ctx }
    }

    /// gRPC and REST routes of this emulator.
    pub fn router(&self) -> axum::Router {
        crate::server::admin_routes(self.ctx.clone())
    }

    /// Closes open streams.
    pub fn shutdown(&self) {}
}

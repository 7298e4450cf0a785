//! The Pub/Sub emulator (stub: to be filled in).
use std::sync::Arc;

use crate::server::Context;

/// Pub/Sub behaviour settings.
#[derive(Clone, Debug, Default)]
pub struct PubSubConfig {}

/// The Pub/Sub emulator's state; a cheap cloneable handle.
#[derive(Clone)]
pub struct PubSub {
    ctx: Arc<Context>,
}

impl PubSub {
    /// A new, empty emulator.
    pub fn new(ctx: Arc<Context>, _config: PubSubConfig) -> Self {
        Self { ctx }
    }

    /// gRPC and REST routes of this emulator.
    pub fn router(&self) -> axum::Router {
        crate::server::admin_routes(self.ctx.clone())
    }

    /// Closes open streams.
    pub fn shutdown(&self) {}
}

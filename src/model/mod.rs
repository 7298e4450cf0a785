//! The values that travel between the pipeline's stages and the stores: a
//! received message as an [`item`], a flush's work as a [`batch`] (events
//! per (post, user) and the apply rules), and the bounded quarantine record
//! ([`poison`]).
//!
//! Invariant: this folder depends only on [`crate::event`]; the pipeline and
//! the stores both use it, and it uses neither, so the values have one home
//! below both.

pub mod batch;
pub mod item;
pub mod poison;

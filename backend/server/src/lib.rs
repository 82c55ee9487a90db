//! Peregrine's server: CLI definitions, the axum application and its routes.

pub mod app;
pub mod cli;
pub mod error;
pub mod serve;

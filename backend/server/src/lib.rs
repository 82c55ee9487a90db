//! Peregrine's server: CLI definitions, the axum application and its routes.

pub mod app;
pub mod cli;
pub mod engine_start;
pub mod error;
pub mod generate;
pub mod routes;
pub mod serve;

//! Peregrine's server: CLI definitions, the axum application, its routes (playground
//! API, OpenAI-compatible API, shares, metrics) and the request queue glue.

pub mod access_args;
pub mod anthropic;
pub mod app;
pub mod auth;
pub mod blocking;
pub mod cli;
pub mod client_limit;
pub mod config;
pub mod connections;
pub mod embedded_playground;
pub mod engine_args;
pub mod engine_flags;
pub mod engine_slot;
pub mod engine_start;
pub mod error;
pub mod extract;
pub mod fields;
pub mod generate;
pub mod ids;
pub mod jobs;
pub mod metrics;
pub mod openai;
pub mod prompt;
pub mod proxy;
pub mod request_context;
pub mod routes;
pub mod security;
pub mod serve;
pub mod share_args;
pub mod share_policy;
pub mod share_rate;
pub mod share_store;
pub mod speculative;
pub mod static_files;
pub mod structured;

//! The playground's components, one per file.

pub mod app;

//! The playground's components, one per file.

pub mod api_key;
pub mod app;
pub mod backend_badge;
pub mod chart;
pub mod controls;
pub mod conversation;
pub mod counters;
pub mod editor;
pub mod output;
pub mod recent_runs;
pub mod settings;
pub mod share_notice;
pub mod shared_run;

//! Pure playground logic, testable natively (`cargo test -p peregrine-frontend --lib`):
//! SSE framing, the run state machine, settings validation, number formatting,
//! recent runs, example prompts, syntax highlighting, markdown rendering, chat
//! conversations and fill-in-the-middle.
//! The browser glue and the Leptos components live in the wasm32-only binary.

pub mod conversation;
pub mod examples;
pub mod fill;
pub mod format;
pub mod highlight;
pub mod markdown;
pub mod recent;
pub mod run;
pub mod schema_check;
pub mod settings;
pub mod sse;

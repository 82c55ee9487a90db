//! Anthropic's Messages API (`POST /v1/messages`): the request, the answer and its
//! events, tool use, and Anthropic's error shape.

pub mod error;
mod events;
pub mod messages;
mod tool_use;

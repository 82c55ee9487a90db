//! Anthropic's Messages API (`POST /v1/messages`): the request, the answer and its
//! events, tool use, token counting (`/v1/messages/count_tokens`), and Anthropic's
//! error shape.

pub mod count_tokens;
pub mod error;
mod events;
pub mod messages;
mod tool_use;

//! Anthropic's Messages API (`POST /v1/messages`): the request, the answer and its
//! events, and Anthropic's error shape.

pub mod error;
mod events;
pub mod messages;

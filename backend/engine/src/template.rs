//! Chat templates rendered with minijinja from the model's own template, in the environment
//! transformers' `apply_chat_template` uses (trim_blocks, lstrip_blocks, loop controls,
//! `raise_exception`, `strftime_now`, Python string methods).

mod json;
mod strftime;

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// Name the one template is registered under inside its environment.
const TEMPLATE_NAME: &str = "chat";

/// One turn of a conversation, as chat templates read it (`message['role']`, `message.content`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// "system", "user", "assistant" (templates decide what else they accept).
    pub role: String,
    /// The turn's text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// A compiled chat template with the special-token strings it may reference.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// The template lists `tools` itself and asks for calls as `<tool_call>` blocks
    /// (Qwen2.5's, Hermes'): the form the server reads calls back in.
    tool_calls: bool,
}

impl ChatTemplate {
    /// Compiles `source`; `bos` / `eos` are what the template sees as `bos_token` / `eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        // transformers renders with these Jinja2 settings; templates are written for them.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime::strftime_now);
        env.add_filter("tojson", json::tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned()).map_err(template_error)?;
        let tool_calls = source.contains("tools") && source.contains("<tool_call>");
        Ok(Self { env, bos: bos.to_owned(), eos: eos.to_owned(), tool_calls })
    }

    /// The tokenizer's own template with its BOS/EOS strings, or `None` when it ships none.
    pub fn from_tokenizer(tokenizer: &Tokenizer) -> Result<Option<Self>> {
        let Some(source) = tokenizer.chat_template() else {
            return Ok(None);
        };
        let text = |id: Option<u32>| id.and_then(|id| tokenizer.decode(&[id]).ok()).unwrap_or_default();
        Self::new(source, &text(tokenizer.bos_id()), &text(tokenizer.eos_id())).map(Some)
    }

    /// The prompt text for `messages`; with `add_generation_prompt` it ends with the
    /// assistant header so the model answers next.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with_tools(messages, &[], add_generation_prompt)
    }

    /// [`Self::render`] with `tools` (OpenAI's `{type: "function", function}` objects, as
    /// transformers' `apply_chat_template(tools=…)` passes them) for the template to list.
    pub fn render_with_tools(&self, messages: &[ChatMessage], tools: &[serde_json::Value], add_generation_prompt: bool) -> Result<String> {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(template_error)?;
        template
            .render(context! {
                messages => messages,
                tools => (!tools.is_empty()).then_some(tools),
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos,
                eos_token => &self.eos,
            })
            .map_err(template_error)
    }

    /// Whether the template lists tools itself and asks for `<tool_call>` blocks.
    pub fn writes_tool_calls(&self) -> bool {
        self.tool_calls
    }
}

/// HF templates call `raise_exception("...")` to reject conversations they cannot format.
fn raise_exception(message: String) -> std::result::Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

/// Keeps minijinja's detail (the template's own message, the line) in the engine error.
fn template_error(e: JinjaError) -> Error {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        msg.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    Error::Template(msg)
}

#[cfg(test)]
mod tests;

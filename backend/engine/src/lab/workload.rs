//! The committed speculative-decoding workload (backend/bench/workloads/speculative.json):
//! repetitive code completions, chat edits of code the message holds, free-form chat.
//! The bench measures it; the tests check every prompt decodes the same with drafts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::generator::TextModel;
use crate::request::Prompt;
use crate::template::ChatMessage;

/// One prompt of the workload.
#[derive(Debug, Clone, Deserialize)]
pub struct Item {
    pub name: String,
    /// `completion`, `edit` or `free`.
    pub class: String,
    /// Raw text (completions).
    #[serde(default)]
    pub prompt: Option<String>,
    /// One user message under the chat template (edits, free-form).
    #[serde(default)]
    pub chat: Option<String>,
}

#[derive(Deserialize)]
struct File {
    prompts: Vec<Item>,
}

/// The classes in the order the bench reports them.
pub const CLASSES: [&str; 3] = ["completion", "edit", "free"];

/// Where the workload lives in the repository.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/workloads/speculative.json")
}

/// Reads the workload at `path`.
pub fn load(path: &Path) -> Result<Vec<Item>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidRequest(format!("cannot read {}: {e}", path.display())))?;
    let file: File = serde_json::from_str(&text).map_err(|e| Error::InvalidRequest(format!("{}: {e}", path.display())))?;
    Ok(file.prompts)
}

impl Item {
    /// The request prompt: raw text, or the chat message.
    pub fn prompt(&self) -> Result<Prompt> {
        match (&self.prompt, &self.chat) {
            (Some(text), None) => Ok(Prompt::Text(text.clone())),
            (None, Some(message)) => Ok(Prompt::Chat(vec![ChatMessage { role: "user".into(), content: message.clone() }])),
            _ => Err(Error::InvalidRequest(format!("workload item {} needs exactly one of prompt and chat", self.name))),
        }
    }

    /// The prompt's token ids under `text`'s tokenizer and template.
    pub fn ids(&self, text: &TextModel) -> Result<Vec<u32>> {
        text.prompt_ids(&self.prompt()?)
    }
}

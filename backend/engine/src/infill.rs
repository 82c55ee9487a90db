//! Fill-in-the-middle prompts laid out as llama.cpp's server lays them out
//! (`format_prompt_infill`, tools/server, as vendored by llama-cpp-python 0.3.36), so an
//! editor plugin written for llama.cpp's `/infill` gets the same model input here:
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]name0\n text0 … [FIM_SEP]filename\n
//! [BOS][FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
//! ```
//!
//! Without a repo token the repository line is left out; without a file separator each
//! extra file is introduced by a `--- snippet ---` line and the current file gets none.
//! Long inputs are cut the way llama.cpp cuts them: the prefix keeps its last
//! ¾·batch tokens, the suffix its first ¼·batch − 2 − prompt tokens, and the extra
//! context its last context − batch − 2·predict tokens.

use crate::error::{Error, Result};
use crate::generator::TextModel;
use crate::tokenizer::{FimTokens, Tokenizer};

/// An extra file of repository context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    pub filename: String,
    pub text: String,
}

/// What the editor sends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfillInput {
    /// Text before the cursor.
    pub prefix: String,
    /// Text after the cursor.
    pub suffix: String,
    /// Other files, oldest context first.
    pub extra: Vec<ExtraFile>,
    /// Text that starts the middle (may hold special tokens, as llama.cpp allows).
    pub prompt: String,
}

/// The sizes that bound the layout (llama.cpp's `n_batch`, `n_predict`, `n_ctx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfillBudget {
    /// Prefix and suffix together fit in this many tokens (¾ prefix, ¼ suffix).
    pub batch: usize,
    /// Tokens to generate (llama.cpp's −1, unlimited, counts as −1).
    pub predict: i64,
    /// The context the extra files may fill, less `batch` and twice `predict`.
    pub context: usize,
}

/// The separator llama.cpp puts before each extra file when the vocabulary has no
/// file-separator token.
const SNIPPET_SEPARATOR: &str = "\n\n--- snippet ---\n\n";
/// The repository name llama.cpp writes after the repo token.
const REPO_NAME: &str = "myproject\n";
/// The current file's name llama.cpp writes after the last file separator.
const CURRENT_FILE: &str = "filename\n";

/// The model input for `input`; `fim` from [`Tokenizer::fim`].
pub fn layout(tok: &Tokenizer, fim: &FimTokens, input: &InfillInput, budget: &InfillBudget) -> Result<Vec<u32>> {
    // User text is plain text: a "<|fim_suffix|>" typed in the editor is not a control token.
    let plain = |s: &str| tok.encode_plain(s, false);
    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(plain(REPO_NAME)?);
    }
    for file in &input.extra {
        match fim.sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(plain(&format!("{}\n", file.filename))?);
            }
            None => extra.extend(plain(SNIPPET_SEPARATOR)?),
        }
        extra.extend(plain(&file.text)?);
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(plain(CURRENT_FILE)?);
    }
    let prompt = tok.encode(&input.prompt, false)?;
    let mut prefix = plain(&input.prefix)?;
    let mut suffix = plain(&input.suffix)?;

    let quarter = budget.batch / 4;
    let prefix_take = prefix.len().min(3 * quarter);
    let suffix_take = suffix.len().min(quarter.saturating_sub(2 + prompt.len()));
    let extra_room = budget.context as i64 - budget.batch as i64 - 2 * budget.predict;
    let extra_take = extra.len().min(extra_room.max(0) as usize);

    prefix.drain(..prefix.len() - prefix_take);
    suffix.truncate(suffix_take);
    let mut out = Vec::with_capacity(extra_take + prefix.len() + suffix.len() + prompt.len() + 5);
    out.extend_from_slice(&extra[extra.len() - extra_take..]);
    if tok.adds_bos() {
        out.extend(tok.bos_id());
    }
    out.push(fim.pre);
    out.extend(prefix);
    out.extend(prompt);
    out.push(fim.suf);
    out.extend(suffix);
    out.push(fim.mid);
    Ok(out)
}

/// The model input of `input` for `text`'s model; a client error when the model has
/// no FIM tokens.
pub fn prompt_ids(text: &TextModel, input: &InfillInput, budget: &InfillBudget) -> Result<Vec<u32>> {
    let fim = fim_tokens(text.tokenizer.as_ref())?;
    layout(text.tokenizer.as_ref().expect("fim_tokens checked it"), &fim, input, budget)
}

/// Whether `text`'s model can fill in the middle (the client error says why not).
pub fn supported(text: &TextModel) -> Result<()> {
    fim_tokens(text.tokenizer.as_ref()).map(|_| ())
}

/// The tokenizer's FIM tokens, or the client error that says which are missing.
pub fn fim_tokens(tok: Option<&Tokenizer>) -> Result<FimTokens> {
    let tok = tok.ok_or_else(|| Error::InvalidRequest("this model has no tokenizer, so it cannot fill in the middle".into()))?;
    tok.fim().map_err(|missing| {
        Error::InvalidRequest(format!(
            "this model cannot fill in the middle: its vocabulary has no FIM {} token{}",
            missing.join(", "),
            if missing.len() > 1 { "s" } else { "" }
        ))
    })
}

//! Tokenizer: the `tokenizers` crate, built from tokenizer.json or GGUF metadata, with
//! llama.cpp's conventions (special tokens in text are parsed as special; BOS only when the
//! model asks) and a byte-exact, stream-friendly decoder.

mod detok;
pub mod fim;
mod gguf;
mod hf_file;
mod pieces;
pub mod pretok;

use std::sync::OnceLock;

pub use detok::Detokenizer;
pub use fim::{FimIds, FimTokens};
use pieces::TokenPieces;

use crate::{Error, Result};

/// Token texts llama.cpp treats as end-of-generation whatever the metadata says
/// (`llama_vocab::impl::load`, "special_eog_ids", as vendored by llama-cpp-python 0.3.36);
/// models mark turn ends with them.
pub const EOG_TOKEN_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];

/// A loaded tokenizer plus the model's special-token conventions.
#[derive(Debug)]
pub struct Tokenizer {
    /// Parses special tokens in the text as special.
    inner: tokenizers::Tokenizer,
    /// A clone that spells special tokens out as text, made on first use of `encode_plain`.
    plain: OnceLock<tokenizers::Tokenizer>,
    pieces: TokenPieces,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    stop_ids: Vec<u32>,
    chat_template: Option<String>,
    /// Fill-in-the-middle tokens (declared or recognised by their text).
    fim: FimIds,
}

/// What the format-specific loaders hand to [`Tokenizer::assemble`].
struct Parts {
    inner: tokenizers::Tokenizer,
    pieces: TokenPieces,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    /// End-of-generation ids besides `eos` (eot, eom, generation_config's list...).
    extra_stops: Vec<u32>,
    chat_template: Option<String>,
    /// FIM tokens the file declares (GGUF metadata); the rest are looked up by text.
    fim: FimIds,
}

impl Tokenizer {
    fn assemble(p: Parts) -> Self {
        let mut stop_ids: Vec<u32> = p.eos.into_iter().chain(p.extra_stops).collect();
        stop_ids.extend(EOG_TOKEN_TEXTS.iter().filter_map(|t| p.inner.token_to_id(t)));
        stop_ids.retain(|&id| (id as usize) < p.pieces.len());
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let fim = FimIds::resolve(p.fim, |t| p.inner.token_to_id(t));
        Self {
            inner: p.inner,
            plain: OnceLock::new(),
            pieces: p.pieces,
            bos: p.bos,
            eos: p.eos,
            add_bos: p.add_bos,
            add_eos: p.add_eos,
            stop_ids,
            chat_template: p.chat_template,
            fim,
        }
    }

    /// Token ids of `text`; special-token strings in it (`<|im_start|>`) become their ids,
    /// like llama.cpp's `tokenize(..., special=true)`. With `add_special`, BOS (and EOS)
    /// are added when the model's tokenizer config asks for them.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_with(&self.inner, text, add_special)
    }

    /// Like [`Self::encode`] but control tokens in `text` are ordinary text (llama.cpp's
    /// `special=false`): use it for untrusted user content.
    pub fn encode_plain(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let plain = self.plain.get_or_init(|| {
            let mut t = self.inner.clone();
            t.set_encode_special_tokens(true);
            t
        });
        self.encode_with(plain, text, add_special)
    }

    fn encode_with(&self, tok: &tokenizers::Tokenizer, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = tok.encode(text, false).map_err(|e| Error::Tokenizer(format!("encoding failed: {e}")))?;
        let mut ids = Vec::with_capacity(enc.len() + 2);
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// The text of `ids`, special tokens spelled out; bytes that do not form UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.pieces.concat(ids)?).into_owned())
    }

    /// A streaming decoder whose deltas concatenate to `decode` of the same ids.
    pub fn detokenizer(&self) -> Detokenizer<'_> {
        Detokenizer::new(&self.pieces)
    }

    /// Number of token ids (one past the largest), added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The beginning-of-sequence id, when the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The primary end-of-sequence id, when the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode(.., add_special = true)` prepends BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Every id that ends generation (eos, eot, `<|im_end|>`...), sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.stop_ids.binary_search(&id).is_ok()
    }

    /// The vocabulary entry for `id` as stored (byte-level BPE spells a space `Ġ`); use
    /// `decode(&[id])` for its text.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary entry, e.g. `"<|im_end|>"`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// The equivalent Hugging Face `tokenizer.json` text (e.g. to export a GGUF's tokenizer).
    pub fn to_json(&self) -> Result<String> {
        self.inner.to_string(false).map_err(|e| Error::Tokenizer(format!("serializing: {e}")))
    }

    /// The bytes token `id` stands for (special tokens spelled out).
    pub fn piece(&self, id: u32) -> Result<&[u8]> {
        self.pieces.get(id)
    }

    /// Ids of the special (control) tokens, which are markers rather than text: a
    /// grammar must never match one as the letters of its name.
    pub fn special_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids
    }

    /// The fill-in-the-middle tokens, or the names of the roles the vocabulary lacks.
    pub fn fim(&self) -> std::result::Result<FimTokens, Vec<&'static str>> {
        self.fim.tokens()
    }

    /// The model's own Jinja chat template, if it ships one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

#[cfg(test)]
mod tests {
    /// The engine thread owns the tokenizer and the server may share it: both need these.
    #[test]
    fn tokenizer_and_template_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<super::Tokenizer>();
        send_sync::<super::Detokenizer<'static>>();
        send_sync::<crate::template::ChatTemplate>();
    }
}

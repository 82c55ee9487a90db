//! Pre-tokenizer regexes for GGUF byte-level BPE vocabularies, keyed by
//! `tokenizer.ggml.pre`; follows llama.cpp's `llama-vocab.cpp` name mapping and
//! `llm_tokenizer_bpe` regex lists (each regex further splits the pieces of the one before).

use crate::{Error, Result};

/// GPT-2's split: contractions, letter runs, digit runs, punctuation runs, whitespace.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama-3's split; llama.cpp spells the case-insensitive contractions out, and so do we.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama-3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How one GGUF `tokenizer.ggml.pre` name pre-tokenizes and merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreTokenizerSpec {
    /// Regexes applied in order; matches and the gaps between them both become pieces.
    pub regexes: Vec<&'static str>,
    /// Whether a piece that is already a whole vocabulary entry skips BPE merges (Llama-3).
    pub ignore_merges: bool,
    /// Whether BOS is prepended when the GGUF does not say (`tokenizer.ggml.add_bos_token`).
    pub default_add_bos: bool,
}

/// The GGUF pre-tokenizer names this module knows, for error messages.
pub const KNOWN_PRE_TOKENIZERS: &[&str] = &[
    "default",
    "gpt-2",
    "gpt2",
    "phi-2",
    "mpt",
    "olmo",
    "mellum",
    "exaone4",
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
    "command-r",
    "exaone",
    "minerva-7b",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "lfm2",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "stablelm2",
    "deepseek-coder",
];

/// The pre-tokenizer llama.cpp uses for the GGUF `tokenizer.ggml.pre` value `name`.
pub fn spec_for(name: &str) -> Result<PreTokenizerSpec> {
    let spec = |regexes: Vec<&'static str>, ignore_merges, default_add_bos| PreTokenizerSpec { regexes, ignore_merges, default_add_bos };
    Ok(match name {
        // llama.cpp's fallback when a converter wrote no name (or "default").
        "default" => spec(vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"], false, false),
        "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" | "mellum" | "exaone4" => spec(vec![GPT2], false, false),
        // StarCoder-family vocabularies isolate every digit before the GPT-2 split.
        "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva-7b" => spec(vec![r"\p{N}", GPT2], false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "lfm2" => spec(vec![LLAMA3], true, true),
        "dbrx" | "smaug-bpe" => spec(vec![LLAMA3], false, false),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" => spec(vec![QWEN2], false, false),
        "deepseek-coder" => spec(vec![r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"], false, false),
        other => {
            return Err(Error::UnsupportedTokenizer(format!(
                "GGUF pre-tokenizer `{other}` is not known (known: {})",
                KNOWN_PRE_TOKENIZERS.join(", ")
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_resolves() {
        for name in KNOWN_PRE_TOKENIZERS {
            assert!(spec_for(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn unknown_name_is_a_clear_error() {
        let err = spec_for("klingon").unwrap_err().to_string();
        assert!(err.contains("klingon") && err.contains("smollm"), "{err}");
    }
}

//! Builds a [`Tokenizer`] from GGUF `tokenizer.ggml.*` metadata the way llama.cpp's
//! `llama_vocab::impl::load` reads it (byte-level BPE only; SentencePiece is refused).

use std::collections::BTreeMap;

use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::pieces::{PieceStyle, TokenPieces};
use super::{pretok, Parts, Tokenizer};
use crate::gguf::{GgufFile, MetaValue};
use crate::{Error, Result};

/// llama.cpp's `llama_token_type` values that mark tokens matched before BPE runs.
const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

impl Tokenizer {
    lab_pub_fn!(
        /// The tokenizer embedded in a GGUF model file.
        fn from_gguf(file: &GgufFile) -> Result<Self> {
            Self::from_gguf_metadata(&file.metadata).map_err(|e| match e {
                Error::Tokenizer(msg) => Error::Tokenizer(format!("{}: {msg}", file.path.display())),
                other => other,
            })
        }
    );

    lab_pub_fn!(
        /// The tokenizer described by GGUF metadata (the `tokenizer.ggml.*` and
        /// `tokenizer.chat_template` keys).
        fn from_gguf_metadata(meta: &BTreeMap<String, MetaValue>) -> Result<Self> {
            let model = meta
                .get("tokenizer.ggml.model")
                .and_then(MetaValue::as_str)
                .ok_or_else(|| Error::Tokenizer("GGUF has no tokenizer.ggml.model".into()))?;
            match model {
                "gpt2" => {}
                "llama" => {
                    return Err(Error::UnsupportedTokenizer(
                        "GGUF SentencePiece (`llama`) vocabularies are not supported; \
                         load the model's tokenizer.json instead"
                            .into(),
                    ))
                }
                other => {
                    return Err(Error::UnsupportedTokenizer(format!(
                        "GGUF tokenizer model `{other}` (only byte-level BPE, `gpt2`, is supported)"
                    )))
                }
            }
            let tokens = string_array(meta, "tokenizer.ggml.tokens")?;
            let types = token_types(meta, tokens.len())?;
            let merges = parse_merges(&string_array(meta, "tokenizer.ggml.merges")?)?;
            // llama.cpp reads a missing name as "default" (old converters wrote none).
            let pre_name = meta.get("tokenizer.ggml.pre").and_then(MetaValue::as_str).unwrap_or("default");
            let spec = pretok::spec_for(pre_name)?;

            let mut inner = byte_level_bpe(&tokens, merges, &spec)?;
            add_special_tokens(&mut inner, &tokens, &types);

            let is_added = |i: usize| matches!(types[i], TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED);
            let pieces = TokenPieces::new(tokens.iter().enumerate().map(|(i, t)| (i as u32, t.as_str(), is_added(i))), PieceStyle::ByteLevel);
            let id = |key: &str| special_id(meta, key, tokens.len());
            let flag = |key: &str| meta.get(key).and_then(MetaValue::as_bool);
            Ok(Tokenizer::assemble(Parts {
                inner,
                pieces,
                bos: id("tokenizer.ggml.bos_token_id"),
                eos: id("tokenizer.ggml.eos_token_id"),
                add_bos: flag("tokenizer.ggml.add_bos_token").unwrap_or(spec.default_add_bos),
                add_eos: flag("tokenizer.ggml.add_eos_token").unwrap_or(false),
                extra_stops: ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"].iter().filter_map(|k| id(k)).collect(),
                chat_template: meta.get("tokenizer.chat_template").and_then(MetaValue::as_str).map(str::to_owned),
                fim: super::FimIds::from_keys(id),
            }))
        }
    );
}

/// A metadata array whose every element is a string.
fn string_array(meta: &BTreeMap<String, MetaValue>, key: &str) -> Result<Vec<String>> {
    let values = meta.get(key).and_then(MetaValue::as_array).ok_or_else(|| Error::Tokenizer(format!("GGUF has no array `{key}`")))?;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| v.as_str().map(str::to_owned).ok_or_else(|| Error::Tokenizer(format!("`{key}`[{i}] is not a string"))))
        .collect()
}

/// Token types, all "normal" when the file has none.
fn token_types(meta: &BTreeMap<String, MetaValue>, n_tokens: usize) -> Result<Vec<i64>> {
    let Some(values) = meta.get("tokenizer.ggml.token_type") else {
        return Ok(vec![1; n_tokens]);
    };
    let values = values.as_array().ok_or_else(|| Error::Tokenizer("`tokenizer.ggml.token_type` is not an array".into()))?;
    if values.len() != n_tokens {
        return Err(Error::Tokenizer(format!("`tokenizer.ggml.token_type` has {} entries for {n_tokens} tokens", values.len())));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| v.as_i64().ok_or_else(|| Error::Tokenizer(format!("`tokenizer.ggml.token_type`[{i}] is not an integer"))))
        .collect()
}

/// "a b" merge rules; like llama.cpp, the separator is the first space after the first
/// char, so a rule may merge a literal space.
fn parse_merges(lines: &[String]) -> Result<Merges> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let split = line.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(at, _)| at);
            split
                .map(|at| (line[..at].to_owned(), line[at + 1..].to_owned()))
                .ok_or_else(|| Error::Tokenizer(format!("merge {i} `{line}` has no space separator")))
        })
        .collect()
}

/// The BPE model, pre-tokenizer and decoder for a GPT-2 style vocabulary.
fn byte_level_bpe(tokens: &[String], merges: Merges, spec: &pretok::PreTokenizerSpec) -> Result<tokenizers::Tokenizer> {
    // Later duplicates win, as in llama.cpp's token_to_id map.
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(spec.ignore_merges)
        .build()
        .map_err(|e| Error::Tokenizer(format!("building BPE from GGUF vocabulary: {e}")))?;
    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(spec.regexes.len() + 1);
    for regex in &spec.regexes {
        let split = Split::new(SplitPattern::Regex((*regex).to_owned()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Error::Tokenizer(format!("pre-tokenizer regex `{regex}`: {e}")))?;
        steps.push(split.into());
    }
    // The regexes above did the splitting; ByteLevel only maps bytes to its alphabet.
    steps.push(ByteLevel::new(false, false, false).into());
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(Sequence::new(steps)));
    inner.with_decoder(Some(ByteLevel::new(false, false, false)));
    Ok(inner)
}

/// Registers control, unknown and user-defined tokens so they are matched whole before
/// BPE; control and unknown ones are "special" (plain encoding spells them out), as in
/// llama.cpp's `tokenizer_st_partition`.
fn add_special_tokens(inner: &mut tokenizers::Tokenizer, tokens: &[String], types: &[i64]) {
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (text, &ty) in tokens.iter().zip(types) {
        if text.is_empty() {
            continue; // an empty pattern would match between every pair of chars
        }
        match ty {
            TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN => special.push(AddedToken::from(text.clone(), true)),
            TOKEN_TYPE_USER_DEFINED => user.push(AddedToken::from(text.clone(), false).normalized(false)),
            _ => {}
        }
    }
    inner.add_special_tokens(&special);
    inner.add_tokens(&user);
}

/// A special-token id key; an id past the vocabulary counts as absent, as llama.cpp warns
/// and ignores it.
fn special_id(meta: &BTreeMap<String, MetaValue>, key: &str, n_tokens: usize) -> Option<u32> {
    let id = meta.get(key)?.as_u64()?;
    u32::try_from(id).ok().filter(|&id| (id as usize) < n_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> MetaValue {
        MetaValue::String(v.to_owned())
    }

    /// A tiny byte-level vocabulary: every ASCII letter, space (`Ġ`), a few merges, two
    /// control tokens.
    fn toy_meta() -> BTreeMap<String, MetaValue> {
        let mut tokens: Vec<String> = vec!["<|endoftext|>".into(), "<|im_start|>".into()];
        tokens.extend(('a'..='z').map(String::from));
        tokens.extend(["Ġ", "!", "<", "|", ">", "_", "0", "1", "\u{010A}", "he", "ll", "hell", "hello", "Ġw", "Ġwo"].map(String::from));
        let types: Vec<MetaValue> = (0..tokens.len()).map(|i| MetaValue::I32(if i < 2 { 3 } else { 1 })).collect();
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"];
        let mut m = BTreeMap::new();
        m.insert("tokenizer.ggml.model".into(), s("gpt2"));
        m.insert("tokenizer.ggml.pre".into(), s("smollm"));
        m.insert("tokenizer.ggml.tokens".into(), MetaValue::Array(tokens.iter().map(|t| s(t)).collect()));
        m.insert("tokenizer.ggml.token_type".into(), MetaValue::Array(types));
        m.insert("tokenizer.ggml.merges".into(), MetaValue::Array(merges.iter().map(|t| s(t)).collect()));
        m.insert("tokenizer.ggml.bos_token_id".into(), MetaValue::U32(1));
        m.insert("tokenizer.ggml.eos_token_id".into(), MetaValue::U32(0));
        m.insert("tokenizer.ggml.add_bos_token".into(), MetaValue::Bool(true));
        m
    }

    #[test]
    fn toy_vocabulary_encodes_merges_and_specials() {
        let tok = Tokenizer::from_gguf_metadata(&toy_meta()).unwrap();
        let id = |t: &str| tok.token_id(t).unwrap();
        let ids = tok.encode("<|im_start|>hello wo", true).unwrap();
        assert_eq!(ids, [1, 1, id("hello"), id("Ġwo")]);
        assert_eq!(tok.decode(&ids).unwrap(), "<|im_start|><|im_start|>hello wo");
        let plain = tok.encode_plain("<|im_start|>", false).unwrap();
        assert!(plain.len() > 1 && !plain.contains(&1), "{plain:?}");
        assert_eq!(tok.eos_ids(), [0]);
        assert_eq!(tok.bos_id(), Some(1));
    }

    #[test]
    fn digits_are_isolated_by_the_smollm_split() {
        let tok = Tokenizer::from_gguf_metadata(&toy_meta()).unwrap();
        let ids = tok.encode("10", false).unwrap();
        assert_eq!(ids, [tok.token_id("1").unwrap(), tok.token_id("0").unwrap()]);
    }

    #[test]
    fn sentencepiece_and_unknown_pre_are_clear_errors() {
        let mut m = toy_meta();
        m.insert("tokenizer.ggml.model".into(), s("llama"));
        let err = Tokenizer::from_gguf_metadata(&m).unwrap_err().to_string();
        assert!(err.contains("SentencePiece"), "{err}");
        let mut m = toy_meta();
        m.insert("tokenizer.ggml.pre".into(), s("mystery"));
        let err = Tokenizer::from_gguf_metadata(&m).unwrap_err().to_string();
        assert!(err.contains("mystery"), "{err}");
    }

    #[test]
    fn malformed_metadata_is_an_error_not_a_panic() {
        let mut m = toy_meta();
        m.insert("tokenizer.ggml.merges".into(), MetaValue::Array(vec![s("nospace")]));
        assert!(Tokenizer::from_gguf_metadata(&m).is_err());
        let mut m = toy_meta();
        m.insert("tokenizer.ggml.token_type".into(), MetaValue::Array(vec![MetaValue::I32(1)]));
        assert!(Tokenizer::from_gguf_metadata(&m).is_err());
        let mut m = toy_meta();
        m.remove("tokenizer.ggml.tokens");
        assert!(Tokenizer::from_gguf_metadata(&m).is_err());
    }

    #[test]
    fn merge_separator_skips_a_leading_space() {
        let merges = parse_merges(&[" a b".to_owned(), "é x".to_owned()]).unwrap();
        assert_eq!(merges, [(" a".to_owned(), "b".to_owned()), ("é".to_owned(), "x".to_owned())]);
    }
}

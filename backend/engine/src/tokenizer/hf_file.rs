//! Loads a [`Tokenizer`] from a Hugging Face `tokenizer.json`, taking BOS/EOS, their use and
//! the chat template from the `tokenizer_config.json` / `generation_config.json` /
//! `chat_template.jinja` beside it, as transformers does.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::Value;

use super::pieces::{PieceStyle, TokenPieces};
use super::{Parts, Tokenizer};
use crate::{Error, Result};

impl Tokenizer {
    /// Loads `tokenizer.json` (or the one inside a model directory) and its sibling configs.
    pub fn from_file(path: &Path) -> Result<Self> {
        let path: PathBuf = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
        let dir = path.parent().unwrap_or(Path::new("."));
        let json = read_text(&path)?;
        let inner = tokenizers::Tokenizer::from_str(&json).map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let generation = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);

        let decoder = serde_json::to_value(inner.get_decoder()).unwrap_or(Value::Null);
        let style = piece_style(&decoder).map_err(|e| match e {
            Error::UnsupportedTokenizer(msg) => Error::UnsupportedTokenizer(format!("{}: {msg}", path.display())),
            other => other,
        })?;
        let vocab = inner.get_vocab(true);
        let pieces = TokenPieces::new(vocab.iter().map(|(t, &id)| (id, t.as_str(), false)), style);

        let named = |key: &str| token_name(&config[key]).and_then(|t| inner.token_to_id(t));
        let bos = named("bos_token").or_else(|| id_value(&generation["bos_token_id"]));
        let gen_eos = id_list(&generation["eos_token_id"]);
        let eos = named("eos_token").or_else(|| gen_eos.first().copied());
        // Without an explicit flag, whatever the post-processor wraps around "" is what
        // transformers adds (Llama-3 prepends <|begin_of_text|>, Qwen2 adds nothing).
        let wrapped = inner.encode("", true).map_err(|e| Error::Tokenizer(format!("{}: post-processor: {e}", path.display())))?;
        let wrapped = wrapped.get_ids();
        let add_bos = config["add_bos_token"].as_bool().unwrap_or(bos.is_some() && wrapped.first() == bos.as_ref());
        let add_eos = config["add_eos_token"].as_bool().unwrap_or(eos.is_some() && wrapped.last() == eos.as_ref());
        let chat_template = match template_from_config(&config["chat_template"]) {
            Some(t) => Some(t),
            None => read_optional_text(&dir.join("chat_template.jinja"))?,
        };
        Ok(Tokenizer::assemble(Parts {
            inner,
            pieces,
            bos,
            eos,
            add_bos,
            add_eos,
            extra_stops: gen_eos,
            chat_template,
            fim: Default::default(),
        }))
    }
}

/// How the tokenizer.json decoder spells bytes, from its serialized form.
fn piece_style(decoder: &Value) -> Result<PieceStyle> {
    let steps: Vec<&Value> = match decoder["type"].as_str() {
        Some("Sequence") => decoder["decoders"].as_array().map(|d| d.iter().collect()).unwrap_or_default(),
        Some(_) => vec![decoder],
        None => vec![],
    };
    let kind = |name: &str| steps.iter().find(|s| s["type"] == name);
    if kind("ByteLevel").is_some() {
        return Ok(PieceStyle::ByteLevel);
    }
    if let Some(meta) = kind("Metaspace") {
        let prepends = match meta["prepend_scheme"].as_str() {
            Some(scheme) => scheme != "never",
            None => meta["add_prefix_space"].as_bool().unwrap_or(true),
        };
        return Ok(PieceStyle::SentencePiece { strip_leading_space: prepends });
    }
    if kind("ByteFallback").is_some() || kind("Replace").is_some() {
        return Ok(PieceStyle::SentencePiece { strip_leading_space: kind("Strip").is_some() });
    }
    let names: Vec<&str> = steps.iter().filter_map(|s| s["type"].as_str()).collect();
    Err(Error::UnsupportedTokenizer(format!("decoder {names:?}: only byte-level BPE and SentencePiece-style decoders are supported")))
}

/// A token named in tokenizer_config.json: a plain string or an AddedToken object.
fn token_name(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v["content"].as_str())
}

fn id_value(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|id| u32::try_from(id).ok())
}

/// generation_config's `eos_token_id`: one id or a list.
fn id_list(v: &Value) -> Vec<u32> {
    match v {
        Value::Array(items) => items.iter().filter_map(id_value).collect(),
        other => id_value(other).into_iter().collect(),
    }
}

/// tokenizer_config's `chat_template`: a string, or named templates (take "default").
fn template_from_config(v: &Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_owned());
    }
    let named = v.as_array()?;
    named.iter().find(|t| t["name"] == "default").or_else(|| named.first()).and_then(|t| t["template"].as_str()).map(str::to_owned)
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.display().to_string(), source })
}

fn read_optional_text(path: &Path) -> Result<Option<String>> {
    if path.is_file() {
        read_text(path).map(Some)
    } else {
        Ok(None)
    }
}

/// An optional JSON file; present but malformed is an error, not a silent default.
fn read_json(path: &Path) -> Result<Option<Value>> {
    let Some(text) = read_optional_text(path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decoder_styles() {
        assert_eq!(piece_style(&json!({"type": "ByteLevel"})).unwrap(), PieceStyle::ByteLevel);
        let llama2 = json!({"type": "Sequence", "decoders": [
            {"type": "Replace"}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip"}]});
        assert_eq!(piece_style(&llama2).unwrap(), PieceStyle::SentencePiece { strip_leading_space: true });
        let never = json!({"type": "Metaspace", "prepend_scheme": "never"});
        assert_eq!(piece_style(&never).unwrap(), PieceStyle::SentencePiece { strip_leading_space: false });
        assert!(piece_style(&json!({"type": "WordPiece"})).is_err());
        assert!(piece_style(&Value::Null).is_err());
    }

    #[test]
    fn config_shapes() {
        assert_eq!(token_name(&json!({"content": "<s>"})), Some("<s>"));
        assert_eq!(id_list(&json!([1, 2])), [1, 2]);
        assert_eq!(id_list(&json!(7)), [7]);
        let named = json!([{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]);
        assert_eq!(template_from_config(&named).as_deref(), Some("d"));
    }
}

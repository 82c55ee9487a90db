//! Per-token byte strings. Decoding is "concatenate the bytes, read UTF-8 lossily", which is
//! exactly what transformers' `ByteLevel` decoder computes; keeping it per token is what lets
//! the incremental detokenizer produce the same text as a one-shot decode.

use crate::{Error, Result};

/// How a vocabulary spells bytes in its token strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceStyle {
    /// GPT-2 byte-level BPE: every byte is one printable char (`Ġ` is a space).
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xNN>` is a raw byte; the first leading space is a
    /// tokenizer artefact and is dropped when `strip_leading_space` is set.
    SentencePiece { strip_leading_space: bool },
}

/// The byte string of every token id, plus the one rule that is not per token.
#[derive(Debug, Clone)]
pub struct TokenPieces {
    bytes: Vec<Box<[u8]>>,
    strip_leading_space: bool,
}

impl TokenPieces {
    /// Builds the table from `(id, token string, raw)` triples; a `raw` token is its own UTF-8
    /// text (llama.cpp prints control and user-defined tokens that way); ids never named
    /// decode to nothing.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a str, bool)>, style: PieceStyle) -> Self {
        let byte_of = byte_level_decoder_table();
        let mut bytes: Vec<Box<[u8]>> = Vec::new();
        for (id, text, raw) in tokens {
            let piece = match style {
                _ if raw => text.as_bytes().to_vec(),
                PieceStyle::ByteLevel => byte_level_bytes(text, &byte_of),
                PieceStyle::SentencePiece { .. } => sentencepiece_bytes(text),
            };
            let idx = id as usize;
            if bytes.len() <= idx {
                bytes.resize(idx + 1, Box::default());
            }
            bytes[idx] = piece.into_boxed_slice();
        }
        let strip_leading_space = matches!(style, PieceStyle::SentencePiece { strip_leading_space: true });
        Self { bytes, strip_leading_space }
    }

    /// One past the largest id in the table.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes of one token, or an error for an id past the vocabulary.
    pub fn get(&self, id: u32) -> Result<&[u8]> {
        self.bytes.get(id as usize).map(|b| &b[..]).ok_or(Error::TokenOutOfRange { id, vocab_size: self.bytes.len() })
    }

    /// Whether the first space of a decoded sequence is dropped (SentencePiece's prefix space).
    pub fn strips_leading_space(&self) -> bool {
        self.strip_leading_space
    }

    /// The full byte string for a sequence of ids, with the leading-space rule applied.
    pub fn concat(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.get(id)?);
        }
        if self.strip_leading_space && out.first() == Some(&b' ') {
            out.remove(0);
        }
        Ok(out)
    }
}

/// Maps GPT-2's printable stand-in chars back to bytes (inverse of `bytes_to_unicode`).
fn byte_level_decoder_table() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut next_spare = 256u32;
    let mut table = std::collections::HashMap::with_capacity(256);
    for b in 0..=255u8 {
        let code = if printable(b) {
            u32::from(b)
        } else {
            next_spare += 1;
            next_spare - 1
        };
        if let Some(c) = char::from_u32(code) {
            table.insert(c, b);
        }
    }
    table
}

/// A byte-level token's bytes; a string with a char outside the byte alphabet (an added
/// token such as a user-defined word with a space) is taken as raw UTF-8, as transformers does.
fn byte_level_bytes(text: &str, byte_of: &std::collections::HashMap<char, u8>) -> Vec<u8> {
    text.chars().map(|c| byte_of.get(&c).copied()).collect::<Option<Vec<u8>>>().unwrap_or_else(|| text.as_bytes().to_vec())
}

/// A SentencePiece token's bytes: `<0xNN>` byte-fallback pieces, `▁` as space.
fn sentencepiece_bytes(text: &str) -> Vec<u8> {
    let hex = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'));
    if let Some(byte) = hex.filter(|h| h.len() == 2).and_then(|h| u8::from_str_radix(h, 16).ok()) {
        return vec![byte];
    }
    text.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_round_trips_every_byte() {
        let table = byte_level_decoder_table();
        assert_eq!(table.len(), 256);
        assert_eq!(table[&'Ġ'], b' ');
        assert_eq!(table[&'Ċ'], b'\n');
        assert_eq!(table[&'a'], b'a');
    }

    #[test]
    fn byte_level_keeps_added_tokens_raw() {
        let pieces = TokenPieces::new(
            [(0, "ĠhÃ©", false), (1, "<|im_start|>", false), (2, "two words", false), (3, "ĠA", true)],
            PieceStyle::ByteLevel,
        );
        assert_eq!(pieces.get(0).unwrap(), " hé".as_bytes());
        assert_eq!(pieces.get(1).unwrap(), b"<|im_start|>");
        assert_eq!(pieces.get(2).unwrap(), b"two words");
        assert_eq!(pieces.get(3).unwrap(), "ĠA".as_bytes());
        assert!(matches!(pieces.get(4), Err(Error::TokenOutOfRange { id: 4, vocab_size: 4 })));
    }

    #[test]
    fn sentencepiece_bytes_and_leading_space() {
        let pieces = TokenPieces::new(
            [(0, "▁Hello", false), (1, "<0xE2>", false), (2, "<0x82>", false), (3, "<0xAC>", false)],
            PieceStyle::SentencePiece { strip_leading_space: true },
        );
        assert_eq!(pieces.concat(&[0, 1, 2, 3, 0]).unwrap(), "Hello€ Hello".as_bytes());
    }
}

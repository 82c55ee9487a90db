//! Incremental detokenizer: turns a stream of token ids into text deltas that never split a
//! UTF-8 char, and whose concatenation equals a one-shot `Tokenizer::decode` of all the ids.

use super::pieces::TokenPieces;
use crate::Result;

/// Streaming decoder for one sequence; create it with [`super::Tokenizer::detokenizer`].
#[derive(Debug, Clone)]
pub struct Detokenizer<'a> {
    pieces: &'a TokenPieces,
    /// Bytes of a char whose later bytes have not arrived yet (at most 3).
    pending: Vec<u8>,
    /// Whether no byte has been seen yet (SentencePiece drops the sequence's first space).
    at_start: bool,
}

impl<'a> Detokenizer<'a> {
    pub(super) fn new(pieces: &'a TokenPieces) -> Self {
        Self { pieces, pending: Vec::new(), at_start: true }
    }

    /// Adds one token and returns the text it completes (possibly empty while a
    /// multi-byte char is still being spelled out across tokens).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.pending.extend_from_slice(self.pieces.get(id)?);
        if self.at_start && !self.pending.is_empty() {
            self.at_start = false;
            if self.pieces.strips_leading_space() && self.pending[0] == b' ' {
                self.pending.remove(0);
            }
        }
        Ok(self.take_complete())
    }

    /// Ends the sequence: bytes that never completed a char come out as U+FFFD, as they
    /// would in a one-shot decode.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }

    /// Emits every complete char; invalid sequences become U+FFFD exactly where
    /// `String::from_utf8_lossy` would put them, and a truncated tail waits for more bytes.
    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut pos = 0;
        while pos < self.pending.len() {
            match std::str::from_utf8(&self.pending[pos..]) {
                Ok(valid) => {
                    out.push_str(valid);
                    pos = self.pending.len();
                }
                Err(e) => {
                    let valid_end = pos + e.valid_up_to();
                    // from_utf8 vouched for this prefix, so the lossy read copies it unchanged.
                    out.push_str(&String::from_utf8_lossy(&self.pending[pos..valid_end]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            pos = valid_end + bad;
                        }
                        None => {
                            pos = valid_end;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..pos);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::pieces::PieceStyle;
    use super::*;

    fn byte_pieces(all: &[&[u8]]) -> TokenPieces {
        // Spell raw bytes in the byte-level alphabet so the table maps them back.
        let table: Vec<String> = all.iter().map(|bytes| bytes.iter().map(|&b| byte_level_char(b)).collect()).collect();
        TokenPieces::new(table.iter().enumerate().map(|(i, s)| (i as u32, s.as_str(), false)), PieceStyle::ByteLevel)
    }

    fn byte_level_char(b: u8) -> char {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        if printable {
            return char::from(b);
        }
        let rank = (0..b).filter(|&x| !((b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE)).count() as u32;
        char::from_u32(256 + rank).unwrap_or('?')
    }

    fn stream(pieces: &TokenPieces, ids: &[u32]) -> Vec<String> {
        let mut d = Detokenizer::new(pieces);
        let mut deltas: Vec<String> = ids.iter().map(|&id| d.push(id).unwrap()).collect();
        deltas.push(d.finish());
        deltas
    }

    #[test]
    fn emoji_split_over_tokens_waits_for_its_last_byte() {
        let smile = "😀".as_bytes();
        let pieces = byte_pieces(&[b"hi ", &smile[..1], &smile[1..3], &smile[3..], b"!"]);
        let deltas = stream(&pieces, &[0, 1, 2, 3, 4]);
        assert_eq!(deltas, ["hi ", "", "", "😀", "!", ""]);
    }

    #[test]
    fn invalid_and_truncated_bytes_match_lossy_decode() {
        let pieces = byte_pieces(&[b"a", &[0xE2, 0x82], b"b", &[0xF0, 0x9F]]);
        let ids = [0, 1, 2, 1, 3];
        let joined: String = stream(&pieces, &ids).concat();
        let one_shot = String::from_utf8_lossy(&pieces.concat(&ids).unwrap()).into_owned();
        assert_eq!(joined, one_shot);
        assert!(joined.starts_with("a\u{FFFD}b"));
    }

    #[test]
    fn sentencepiece_drops_only_the_first_space() {
        let pieces = TokenPieces::new([(0, "▁Hi", false), (1, "▁there", false)], PieceStyle::SentencePiece { strip_leading_space: true });
        assert_eq!(stream(&pieces, &[0, 1]).concat(), "Hi there");
    }

    #[test]
    fn unknown_id_is_an_error() {
        let pieces = byte_pieces(&[b"a"]);
        assert!(Detokenizer::new(&pieces).push(7).is_err());
    }
}

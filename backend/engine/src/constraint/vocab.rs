//! The model's vocabulary as llguidance sees it: toktrie's byte trie over every token's
//! bytes, special tokens behind toktrie's marker byte (so no grammar matches them as
//! text), and the model's end-of-generation ids as the trie's EOS set. Built from the
//! engine's own tokenizer, whose per-token bytes are what toktrie's Hugging Face bridge
//! would compute; the bridge pins an older `tokenizers` and would build a second copy.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// A vocabulary for llguidance: the trie alone.
struct Vocab {
    trie: TokTrie,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Greedy longest-match over the trie. llguidance asks the environment to tokenize
    /// only for forced-token fast-forwarding and prompt healing, which this engine does
    /// not use: masks and commits work on the trie directly.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }
}

/// The trie of `tokenizer`'s vocabulary padded to the runtime's `vocab_size` logits
/// (ids the tokenizer does not name become unmatchable special entries).
pub(super) fn tok_env(tokenizer: &Tokenizer, vocab_size: usize) -> Result<TokEnv> {
    let n = vocab_size.max(tokenizer.vocab_size());
    let special = tokenizer.special_ids();
    let words: Vec<Vec<u8>> = (0..n as u32)
        .map(|id| {
            let named = (id as usize) < tokenizer.vocab_size();
            let bytes = if named { tokenizer.piece(id).map(<[u8]>::to_vec).unwrap_or_default() } else { Vec::new() };
            if !named || special.binary_search(&id).is_ok() {
                // The marker, then a name no text produces.
                let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                marked.extend_from_slice(if bytes.is_empty() { format!("<[{id}]>").into_bytes() } else { bytes }.as_slice());
                marked
            } else {
                bytes
            }
        })
        .collect();
    let eos = tokenizer.eos_ids();
    let first_eos = *eos.first().ok_or_else(|| Error::Grammar("this model has no end-of-generation token to end a grammar with".into()))?;
    let info = TokRxInfo::new(n as u32, first_eos);
    let trie = TokTrie::from(&info, &words).with_eos_tokens(eos);
    Ok(Arc::new(Vocab { trie }))
}

//! One run's walk through its grammar: before each token the logits of every token the
//! grammar does not allow become −∞, after it the sampled token advances the parser.
//! The sampler sees ordinary logits, so every sampling setting works unchanged.

use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

use crate::error::{Error, Result};

/// A run's grammar state.
pub struct Guide {
    matcher: Matcher,
    /// The trie's end-of-generation ids: allowed exactly when the grammar is complete.
    ends: Vec<u32>,
    /// The masked copy of the last logits.
    masked: Vec<f32>,
}

impl Guide {
    pub(super) fn new(matcher: Matcher) -> Guide {
        let ends = matcher.tok_env().map(|env| env.tok_trie().eos_tokens().to_vec()).unwrap_or_default();
        Guide { matcher, ends, masked: Vec::new() }
    }

    /// The tokens allowed next (only the end ids once the grammar is complete); an
    /// error, with the library's reason, when none is.
    pub(super) fn allowed(&mut self) -> std::result::Result<SimpleVob, String> {
        let mask = self.matcher.compute_mask_or_eos().map_err(|e| e.to_string())?;
        if mask.is_zero() {
            return Err("no token of the vocabulary can continue the output".into());
        }
        Ok(mask)
    }

    /// `logits` with every token the grammar forbids next at −∞.
    pub(crate) fn mask<'a>(&'a mut self, logits: &[f32]) -> Result<&'a [f32]> {
        let allowed = self.allowed().map_err(Error::Unsatisfiable)?;
        self.masked.clear();
        self.masked.resize(logits.len(), f32::NEG_INFINITY);
        allowed.iter_set_entries(|i| {
            if let Some(&l) = logits.get(i) {
                self.masked[i] = l;
            }
        });
        Ok(&self.masked)
    }

    /// The tokens allowed next as a bitmap over `vocab` tokens in `words` (token i is
    /// bit i % 32 of word i / 32; the device runtime copies it for its kernel to mask
    /// with); the same errors as [`Guide::mask`].
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn allowed_bits(&mut self, vocab: usize, words: &mut Vec<u32>) -> Result<()> {
        let allowed = self.allowed().map_err(Error::Unsatisfiable)?;
        let bits = allowed.as_slice();
        words.clear();
        words.resize(vocab.div_ceil(32), 0);
        let n = words.len().min(bits.len());
        words[..n].copy_from_slice(&bits[..n]);
        // A trie longer than the model's rows: its extra ids stay forbidden.
        if let (Some(last), tail @ 1..) = (words.last_mut(), vocab % 32) {
            *last &= (1u32 << tail) - 1;
        }
        Ok(())
    }

    /// Whether `id` ends the output (an end id the grammar allowed: it is complete).
    pub(crate) fn is_end(&self, id: u32) -> bool {
        self.ends.contains(&id)
    }

    /// Advances the grammar by the sampled `id`.
    pub(crate) fn commit(&mut self, id: u32) -> Result<()> {
        self.matcher.consume_token(id).map_err(|e| Error::Unsatisfiable(e.to_string()))
    }

    /// Whether the grammar is complete and allows nothing more: the run ends here.
    pub(crate) fn complete(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }
}

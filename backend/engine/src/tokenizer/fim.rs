//! The fill-in-the-middle control tokens of a vocabulary, found as llama.cpp finds them
//! (`llama_vocab::impl::load`, as vendored by llama-cpp-python 0.3.36): the GGUF keys
//! `tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id` first, else the first
//! vocabulary entry spelled like one of the known families' tokens.

/// Token texts llama.cpp recognises, per role, in its order.
const PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
    "<MID>",
    "\u{2581}<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const REP: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const SEP: &[&str] = &["<|file_sep|>"];

/// The GGUF metadata key of each role, in the order of [`FimIds`]' fields.
pub const GGUF_KEYS: [&str; 6] = [
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
];

/// Each FIM role's token, where the vocabulary has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FimIds {
    /// Before the prefix.
    pub pre: Option<u32>,
    /// Before the suffix.
    pub suf: Option<u32>,
    /// Where the middle (the completion) starts.
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    /// Before the repository name (repo-level FIM).
    pub rep: Option<u32>,
    /// Before each file name (repo-level FIM).
    pub sep: Option<u32>,
}

/// A vocabulary that can fill in the middle: the three roles it cannot do without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: u32,
    pub suf: u32,
    pub mid: u32,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

impl FimIds {
    /// `declared` (from metadata) with every missing role filled by the first known text
    /// `lookup` finds in the vocabulary.
    pub fn resolve(declared: FimIds, lookup: impl Fn(&str) -> Option<u32>) -> FimIds {
        let find = |given: Option<u32>, names: &[&str]| given.or_else(|| names.iter().find_map(|n| lookup(n)));
        FimIds {
            pre: find(declared.pre, PRE),
            suf: find(declared.suf, SUF),
            mid: find(declared.mid, MID),
            pad: find(declared.pad, PAD),
            rep: find(declared.rep, REP),
            sep: find(declared.sep, SEP),
        }
    }

    /// The roles by GGUF key order, to fill from metadata.
    pub fn from_keys(mut id: impl FnMut(&str) -> Option<u32>) -> FimIds {
        let [pre, suf, mid, pad, rep, sep] = GGUF_KEYS.map(&mut id);
        FimIds { pre, suf, mid, pad, rep, sep }
    }

    /// The tokens infill needs, or the names of the missing ones.
    pub fn tokens(&self) -> std::result::Result<FimTokens, Vec<&'static str>> {
        match (self.pre, self.suf, self.mid) {
            (Some(pre), Some(suf), Some(mid)) => Ok(FimTokens { pre, suf, mid, rep: self.rep, sep: self.sep }),
            _ => Err([("prefix", self.pre), ("suffix", self.suf), ("middle", self.mid)]
                .into_iter()
                .filter(|(_, id)| id.is_none())
                .map(|(name, _)| name)
                .collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_wins_then_the_first_known_text() {
        let vocab = |t: &str| match t {
            "<fim_prefix>" => Some(1),
            "<PRE>" => Some(2),
            "<fim_suffix>" => Some(3),
            "<fim_middle>" => Some(4),
            "<reponame>" => Some(5),
            _ => None,
        };
        let found = FimIds::resolve(FimIds::default(), vocab);
        assert_eq!(found, FimIds { pre: Some(1), suf: Some(3), mid: Some(4), pad: None, rep: Some(5), sep: None });
        let declared = FimIds { pre: Some(9), ..FimIds::default() };
        assert_eq!(FimIds::resolve(declared, vocab).pre, Some(9));
        assert_eq!(found.tokens().unwrap(), FimTokens { pre: 1, suf: 3, mid: 4, rep: Some(5), sep: None });
        let none = FimIds::resolve(FimIds::default(), |_| None);
        assert_eq!(none.tokens().unwrap_err(), ["prefix", "suffix", "middle"]);
    }
}

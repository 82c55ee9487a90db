//! Prompt-lookup drafting (the idea of llama.cpp's `ngram` lookup and of "prompt lookup
//! decoding"): the next tokens of a sequence are guessed from what followed the latest
//! earlier occurrence of its last few tokens, found in the sequence itself (prompt and
//! output so far). No model runs; a guess costs one backwards scan of the ids.

/// Longest suffix matched: longer matches are rarer but their continuations are
/// right more often, so the search starts here and shortens to one token.
pub const MAX_NGRAM: usize = 4;

/// A proposal: the drafted tokens and the length of the match they came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Proposal {
    pub tokens: Vec<u32>,
    /// Tokens of the suffix that matched (0 when nothing did).
    pub matched: usize,
}

/// Up to `k` tokens that followed the latest earlier occurrence of the longest suffix
/// of `history` (of `MAX_NGRAM` tokens down to one) that occurs earlier.
pub fn propose(history: &[u32], k: usize) -> Proposal {
    let len = history.len();
    if k == 0 || len < 2 {
        return Proposal::default();
    }
    for n in (1..=MAX_NGRAM.min(len - 1)).rev() {
        let suffix = &history[len - n..];
        // Latest occurrence first: recent text predicts the next tokens best (the row
        // just written, the arm just closed). It must end before the suffix itself so
        // that at least one token follows it.
        let found = (0..len - n).rev().find(|&start| &history[start..start + n] == suffix);
        if let Some(start) = found {
            let from = start + n;
            let to = (from + k).min(len);
            return Proposal { tokens: history[from..to].to_vec(), matched: n };
        }
    }
    Proposal::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_match_wins_and_its_continuation_is_drafted() {
        // "1 2 3 9" then "5 2 3 4" then "2 3": the 2-token suffix [2, 3] occurs twice;
        // the latest occurrence is followed by 4.
        let h = [1, 2, 3, 9, 5, 2, 3, 4, 7, 2, 3];
        assert_eq!(propose(&h, 2), Proposal { tokens: vec![4, 7], matched: 2 });
        // A 3-token match beats the later 2-token one.
        let h = [8, 2, 3, 6, 6, 2, 3, 5, 8, 2, 3];
        assert_eq!(propose(&h, 3), Proposal { tokens: vec![6, 6, 2], matched: 3 });
    }

    #[test]
    fn the_draft_stops_at_the_end_of_the_history() {
        let h = [4, 5, 4];
        assert_eq!(propose(&h, 8), Proposal { tokens: vec![5, 4], matched: 1 });
    }

    #[test]
    fn no_match_and_no_room_draft_nothing() {
        assert_eq!(propose(&[1, 2, 3, 4], 4), Proposal::default());
        assert_eq!(propose(&[1, 1], 0), Proposal::default());
        assert_eq!(propose(&[1], 3), Proposal::default());
    }
}

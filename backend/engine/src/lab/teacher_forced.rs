//! Teacher-forced top-1 agreement of a whole greedy run with a CPU scoring of the same
//! tokens: each generated token must be the CPU's top-1 at its position, or a near-tie
//! that the measured logit difference explains (the CPU's margin between its pick and
//! the GPU's is within twice the largest logit difference at that position). Used by
//! the GPU tests and the CUDA bench's verified runs.

use super::logits::{rel_err_max, NearTie};

/// How a run's tokens fared against the CPU's logits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Agreement {
    /// Positions compared.
    pub positions: usize,
    /// Positions where the GPU's token is the CPU's top-1.
    pub agree: usize,
    /// Disagreements whose margin is within the logit difference.
    pub near_ties: usize,
    /// Disagreements the logit difference does not explain, described.
    pub unexplained: Vec<String>,
    /// Largest logit difference relative to the CPU row's largest magnitude.
    pub worst_rel: f64,
}

impl Agreement {
    /// Every position compared, every disagreement a near-tie.
    pub fn passed(&self, expected_positions: usize) -> bool {
        self.positions == expected_positions && self.unexplained.is_empty()
    }
}

/// Compares `tokens[t]`, chosen by the GPU from `gpu[t]`, with `cpu[t]`, the CPU's
/// logits at the same position (teacher-forced on the same preceding tokens).
pub fn agreement(tokens: &[u32], gpu: &[Vec<f32>], cpu: &[Vec<f32>]) -> Agreement {
    let mut a = Agreement::default();
    for ((&token, g), c) in tokens.iter().zip(gpu).zip(cpu) {
        a.positions += 1;
        a.worst_rel = a.worst_rel.max(rel_err_max(g, c));
        let tie = NearTie::of(c, g, token);
        if tie.best == token {
            a.agree += 1;
        } else if tie.explained() {
            a.near_ties += 1;
        } else {
            a.unexplained.push(format!(
                "step {}: GPU {token}, CPU {}, margin {:.2e} > 2 × {:.2e}",
                a.positions - 1,
                tie.best,
                tie.margin,
                tie.max_diff
            ));
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_ties_pass_and_real_disagreements_are_named() {
        let cpu = vec![vec![1.0, 3.0, 2.99], vec![0.0, 5.0, 1.0], vec![4.0, 0.0, 0.0]];
        // Step 2: the logits agree but the token is not their argmax (a broken pick).
        let gpu = vec![vec![1.0, 2.98, 3.0], vec![0.0, 5.0, 1.0], vec![4.0, 0.0, 0.0]];
        let a = agreement(&[2, 1, 2], &gpu, &cpu);
        assert_eq!((a.positions, a.agree, a.near_ties), (3, 1, 1));
        assert_eq!(a.unexplained.len(), 1, "{a:?}");
        assert!(a.unexplained[0].starts_with("step 2: GPU 2, CPU 0"), "{a:?}");
        assert!(!a.passed(3));
        let two = vec![cpu[1].clone(), cpu[1].clone()];
        let clean = agreement(&[1, 1], &two, &two);
        assert!(clean.passed(2) && !clean.passed(3));
    }
}

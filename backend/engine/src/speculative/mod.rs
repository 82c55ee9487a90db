//! Speculative decoding by prompt lookup: each step drafts tokens from the request's
//! own ids (`lookup`), runs them as extra rows of the same sequence in one pass, keeps
//! the longest prefix the target agrees with plus one token of its own, and rolls the
//! rejected rows out of the KV cache (`verify`). What a request may draft is a
//! [`DraftPlan`]; how much each step drafts is the [`Drafter`]'s choice.

pub mod lookup;
pub mod verify;

use crate::error::{Error, Result};

/// Whether requests draft (`--speculative`, the request's `speculative` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpeculativeMode {
    /// One token per step.
    Off,
    /// Draft by prompt lookup where the runtime can verify drafts.
    #[default]
    Lookup,
}

impl SpeculativeMode {
    /// The mode a CLI or request names (`lookup`, `off`).
    pub fn parse(name: &str) -> Option<SpeculativeMode> {
        match name {
            "lookup" => Some(SpeculativeMode::Lookup),
            "off" => Some(SpeculativeMode::Off),
            _ => None,
        }
    }
}

/// How a step's draft is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sizing {
    /// By the request's acceptance so far and what a row costs on the runtime, so a
    /// request whose drafts miss stops paying for them.
    #[default]
    Adaptive,
    /// Every match drafts up to the plan's maximum (tests and measurements: the most
    /// verification work a plan allows).
    Fixed,
}

/// What a runtime's step can verify.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyCapacity {
    /// Rows of one sequence one step may carry: its token plus the drafts (1: no drafts).
    pub rows: usize,
    /// What one more row of a sequence costs, as a share of a one-row step.
    pub row_cost: f32,
}

impl VerifyCapacity {
    /// A runtime that runs one token per sequence per step.
    pub const SINGLE: VerifyCapacity = VerifyCapacity { rows: 1, row_cost: 1.0 };

    /// Most drafted tokens per step.
    pub fn max_draft(&self) -> usize {
        self.rows.saturating_sub(1)
    }
}

/// A request's say on speculation: `None` fields take the engine's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpeculativeRequest {
    /// The request's `speculative` field.
    pub mode: Option<SpeculativeMode>,
    /// llama.cpp's `speculative.n_max`: most tokens drafted per step (0 = off).
    pub n_max: Option<usize>,
    pub sizing: Sizing,
}

/// Drafted tokens a request may verify per step when it does not say: the batched
/// step's weight tiles take four rows at once, so a draft of three rides on the
/// token's own pass over the weights.
pub const DEFAULT_DRAFT_MAX: usize = 3;

/// What one run may draft.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftPlan {
    /// Most drafted tokens per step (0: no speculation).
    pub max: usize,
    pub sizing: Sizing,
    /// The runtime's cost of a row (see [`VerifyCapacity::row_cost`]).
    pub row_cost: f32,
}

impl DraftPlan {
    /// No speculation.
    pub const OFF: DraftPlan = DraftPlan { max: 0, sizing: Sizing::Adaptive, row_cost: 1.0 };

    /// This plan, drafting no more than `capacity` verifies (a runtime's own guard,
    /// whoever built the job).
    pub fn within(self, capacity: VerifyCapacity) -> DraftPlan {
        DraftPlan { max: self.max.min(capacity.max_draft()), row_cost: capacity.row_cost, ..self }
    }

    /// Checks a request's settings against the runtime's capacity: a draft size
    /// above it, or speculation asked of a runtime that verifies no drafts, is a
    /// client error naming the field.
    pub fn check(request: &SpeculativeRequest, capacity: VerifyCapacity) -> Result<()> {
        if let Some(n) = request.n_max {
            if n > capacity.max_draft() {
                return Err(Error::InvalidRequest(format!(
                    "speculative.n_max ({n}) is more than the {} drafted tokens this runtime verifies per step",
                    capacity.max_draft()
                )));
            }
        }
        if request.mode == Some(SpeculativeMode::Lookup) && capacity.max_draft() == 0 {
            return Err(Error::InvalidRequest("speculative: this runtime verifies one token per step and cannot speculate".into()));
        }
        Ok(())
    }

    /// The plan of a request under the engine's default `mode`, never more than
    /// `capacity` verifies (whatever the request says).
    pub fn of(request: &SpeculativeRequest, default: SpeculativeMode, capacity: VerifyCapacity) -> DraftPlan {
        let mode = request.mode.unwrap_or(default);
        let max = match mode {
            SpeculativeMode::Off => 0,
            SpeculativeMode::Lookup => request.n_max.unwrap_or(DEFAULT_DRAFT_MAX),
        };
        DraftPlan { max: max.min(capacity.max_draft()), sizing: request.sizing, row_cost: capacity.row_cost }
    }
}

/// One step's draft: the tokens that run after the step's own token, and the first
/// token lookup proposed (whether it ran or not).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub guess: Option<u32>,
}

/// A run's counts of drafted and accepted tokens (llama.cpp's `draft_n`,
/// `draft_n_accepted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DraftCounts {
    pub drafted: usize,
    pub accepted: usize,
}

/// Weight of the newest outcome in the running acceptance estimate: a few misses in
/// a row turn drafting off, a few hits turn it back on.
const RATE_WEIGHT: f32 = 0.25;
/// The acceptance estimate a request starts from: code prompts often repeat, free
/// text rarely, so the first matches get the benefit of the doubt, no more.
const RATE_START: f32 = 0.5;

/// One request's drafting state: the plan, and the running estimate of how likely a
/// drafted token is to be accepted given the one before it was.
#[derive(Debug, Clone)]
pub struct Drafter {
    plan: DraftPlan,
    rate: f32,
    pub counts: DraftCounts,
}

impl Drafter {
    pub fn new(plan: DraftPlan) -> Drafter {
        Drafter { plan, rate: RATE_START, counts: DraftCounts::default() }
    }

    /// The draft for the step after `history`, at most `room` tokens (what the run may
    /// still emit beyond the step's own token). Runs nothing when nothing matches or
    /// when the estimate says drafting loses here.
    pub fn draft(&mut self, history: &[u32], room: usize) -> Draft {
        let cap = self.plan.max.min(room);
        if cap == 0 {
            return Draft::default();
        }
        let mut p = lookup::propose(history, cap);
        let guess = p.tokens.first().copied();
        let k = match self.plan.sizing {
            Sizing::Fixed => p.tokens.len(),
            Sizing::Adaptive => best_draft(self.rate, self.plan.row_cost, p.tokens.len()),
        };
        p.tokens.truncate(k);
        Draft { tokens: p.tokens, guess }
    }

    /// What a step made of `draft`: the first `accepted` of its tokens were accepted,
    /// and `next` is the token the target produced after the accepted ones. When
    /// nothing ran, whether the guess was `next` is a free look at how lookup fares,
    /// so a request that stopped drafting can start again.
    pub fn record(&mut self, draft: &Draft, accepted: usize, next: Option<u32>) {
        let drafted = draft.tokens.len();
        self.counts.drafted += drafted;
        self.counts.accepted += accepted;
        if drafted > 0 {
            // Accepted tokens are hits; the first rejected one (if any) a miss.
            for _ in 0..accepted {
                self.observe(true);
            }
            if accepted < drafted {
                self.observe(false);
            }
        } else if let (Some(guess), Some(next)) = (draft.guess, next) {
            self.observe(guess == next);
        }
    }

    fn observe(&mut self, hit: bool) {
        let x = if hit { 1.0 } else { 0.0 };
        self.rate += RATE_WEIGHT * (x - self.rate);
    }
}

/// The draft length up to `available` that maximises tokens per unit of step cost
/// when each drafted token is accepted with probability `rate` given its
/// predecessor was: a step of k drafts emits 1 + r + … + r^k tokens on average and
/// costs 1 + k·row_cost. Zero when no draft beats the plain step.
pub fn best_draft(rate: f32, row_cost: f32, available: usize) -> usize {
    let mut best = (0, 1.0f32);
    let mut expected = 1.0f32;
    let mut term = 1.0f32;
    for k in 1..=available {
        term *= rate;
        expected += term;
        let gain = expected / (1.0 + k as f32 * row_cost);
        if gain > best.1 {
            best = (k, gain);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_size_follows_acceptance_and_row_cost() {
        assert_eq!(best_draft(0.3, 0.4, 8), 0, "a poor acceptance drafts nothing");
        assert_eq!(best_draft(0.9, 1.0, 8), 0, "rows as dear as steps never pay");
        let cheap = best_draft(0.9, 0.1, 8);
        let dear = best_draft(0.9, 0.4, 8);
        assert!(cheap > dear && dear >= 1, "cheap rows draft more: {cheap} vs {dear}");
        assert_eq!(best_draft(0.99, 0.1, 2), 2, "never more than available");
    }

    #[test]
    fn misses_turn_drafting_off_and_free_hits_turn_it_back_on() {
        let plan = DraftPlan { max: 4, sizing: Sizing::Adaptive, row_cost: 0.4 };
        let mut d = Drafter::new(plan);
        let history = [1, 2, 3, 1, 2, 3, 1, 2];
        let missed = Draft { tokens: vec![7, 7], guess: Some(7) };
        for _ in 0..8 {
            d.record(&missed, 0, Some(5));
        }
        assert!(d.draft(&history, 8).tokens.is_empty());
        let looked = Draft { tokens: vec![], guess: Some(5) };
        for _ in 0..8 {
            d.record(&looked, 0, Some(5));
        }
        assert!(!d.draft(&history, 8).tokens.is_empty());
        assert_eq!(d.counts, DraftCounts { drafted: 16, accepted: 0 });
    }

    #[test]
    fn requests_are_checked_against_the_capacity() {
        let cap = VerifyCapacity { rows: 4, row_cost: 0.4 };
        let ask = |n| SpeculativeRequest { n_max: Some(n), ..Default::default() };
        assert!(DraftPlan::check(&ask(3), cap).is_ok());
        assert!(DraftPlan::check(&ask(4), cap).unwrap_err().to_string().contains("speculative.n_max"));
        let lookup = SpeculativeRequest { mode: Some(SpeculativeMode::Lookup), ..Default::default() };
        assert!(DraftPlan::check(&lookup, VerifyCapacity::SINGLE).unwrap_err().to_string().contains("speculative"));
        assert_eq!(DraftPlan::of(&SpeculativeRequest::default(), SpeculativeMode::Lookup, VerifyCapacity::SINGLE).max, 0);
        assert_eq!(DraftPlan::of(&ask(2), SpeculativeMode::Off, cap).max, 0);
        assert_eq!(DraftPlan::of(&SpeculativeRequest::default(), SpeculativeMode::Off, cap).max, 0);
        let on = SpeculativeRequest { mode: Some(SpeculativeMode::Lookup), n_max: Some(2), ..Default::default() };
        assert_eq!(DraftPlan::of(&on, SpeculativeMode::Off, cap).max, 2);
    }
}

//! Chat conversations in the playground: a finished run becomes a turn of the history
//! when the next message is sent; regenerate and edit act on the last turn, which is
//! the current run.

use peregrine_api::playground::{ChatTurn, Mode, MAX_TURNS};

use crate::run::{Phase, RunState};

/// The turn `run` adds to the conversation: a finished chat answer (a stopped or
/// failed one is not kept).
pub fn finished_turn(run: &RunState) -> Option<ChatTurn> {
    let done = matches!(run.phase, Phase::Done { .. });
    (done && run.mode == Mode::Chat).then(|| ChatTurn { user: run.prompt.clone(), assistant: run.output.clone(), timings: run.timings })
}

/// The history a new message is sent after: `history` plus the finished current run,
/// the oldest turns dropped beyond [`MAX_TURNS`].
pub fn with_current(history: &[ChatTurn], run: &RunState) -> Vec<ChatTurn> {
    let mut turns = history.to_vec();
    turns.extend(finished_turn(run));
    let excess = turns.len().saturating_sub(MAX_TURNS);
    turns.drain(..excess);
    turns
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_api::playground::StreamEvent;
    use peregrine_api::{FinishReason, Timings, Usage};

    fn finished(prompt: &str, output: &str, mode: Mode) -> RunState {
        let mut r = RunState::connecting(prompt, mode);
        r.apply(StreamEvent::Token { text: output.into(), tokens: 1 });
        r.apply(StreamEvent::Done { finish_reason: FinishReason::Stop, usage: Usage::default(), timings: Timings::default() });
        r
    }

    #[test]
    fn a_finished_chat_run_joins_the_history() {
        let first = ChatTurn { user: "a".into(), assistant: "b".into(), timings: None };
        let turns = with_current(std::slice::from_ref(&first), &finished("c", "d", Mode::Chat));
        assert_eq!(turns.len(), 2);
        assert_eq!((turns[1].user.as_str(), turns[1].assistant.as_str()), ("c", "d"));
        assert!(turns[1].timings.is_some());
    }

    #[test]
    fn stopped_failed_and_completion_runs_do_not() {
        let mut stopped = RunState::connecting("c", Mode::Chat);
        stopped.apply(StreamEvent::Token { text: "d".into(), tokens: 1 });
        stopped.stop();
        assert!(with_current(&[], &stopped).is_empty());
        assert!(with_current(&[], &finished("c", "d", Mode::Complete)).is_empty());
        assert!(with_current(&[], &RunState::default()).is_empty());
    }

    #[test]
    fn the_oldest_turns_go_beyond_the_limit() {
        let many: Vec<ChatTurn> =
            (0..MAX_TURNS).map(|i| ChatTurn { user: i.to_string(), assistant: String::new(), timings: None }).collect();
        let turns = with_current(&many, &finished("last", "x", Mode::Chat));
        assert_eq!(turns.len(), MAX_TURNS);
        assert_eq!(turns[0].user, "1");
        assert_eq!(turns.last().unwrap().user, "last");
    }
}

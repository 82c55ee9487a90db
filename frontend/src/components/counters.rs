//! The live speed counters (decode tok/s, tokens per step, time to first token,
//! tokens, elapsed), announced politely to screen readers, and the tok/s chart.

use leptos::prelude::*;
use peregrine_frontend::format;

use super::chart::Chart;
use crate::state::Playground;

/// Speed figures of the current run.
#[component]
pub fn Counters() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let tok_per_s = move || pg.run.with(|r| format::tok_per_s(r.tok_per_s()));
    let per_step = move || pg.run.with(|r| format::tokens_per_step(r.tokens_per_step()));
    let ttft = move || pg.run.with(|r| format::ms(r.ttft_ms()));
    let tokens = move || pg.run.with(|r| r.tokens.to_string());
    let elapsed = move || pg.run.with(|r| format::seconds(r.elapsed_ms()));
    let started = move || pg.run.with(|r| !matches!(r.phase, peregrine_frontend::run::Phase::Idle));
    view! {
        <section class="speed" aria-labelledby="speed-heading">
            <h2 id="speed-heading" class="visually-hidden">"Speed"</h2>
            <dl class="counters" aria-live="polite" data-testid="counters" class:idle=move || !started()>
                <div class="counter primary">
                    <dt>"Decode tok/s"</dt>
                    <dd data-testid="tok-per-s">{tok_per_s}</dd>
                </div>
                <div class="counter">
                    <dt><abbr title="tokens per pass over the weights: above 1 where speculative decoding's drafted tokens are accepted">"Tokens/step"</abbr></dt>
                    <dd data-testid="tokens-per-step">{per_step}</dd>
                </div>
                <div class="counter">
                    <dt><abbr title="time to first token">"TTFT"</abbr></dt>
                    <dd data-testid="ttft">{ttft}</dd>
                </div>
                <div class="counter">
                    <dt>"Tokens"</dt>
                    <dd data-testid="tokens">{tokens}</dd>
                </div>
                <div class="counter">
                    <dt>"Elapsed"</dt>
                    <dd data-testid="elapsed">{elapsed}</dd>
                </div>
            </dl>
            <Chart/>
        </section>
    }
}

//! A chat's earlier turns above the current answer: each message, its answer as
//! sanitised markdown, and the turn's own speed figures.

use leptos::prelude::*;
use peregrine_api::playground::{ChatTurn, Mode};
use peregrine_frontend::{format, markdown};

use crate::state::Playground;

/// The conversation so far (chat mode, once there is an earlier turn).
#[component]
pub fn Conversation() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let shown = move || pg.mode.get() == Mode::Chat && pg.history.with(|h| !h.is_empty());
    let system = move || pg.system.get();
    view! {
        <Show when=shown>
            <section class="panel conversation" data-testid="conversation" aria-labelledby="conversation-heading">
                <div class="panel-head">
                    <h2 id="conversation-heading">"Conversation"</h2>
                    <span class="panel-note">{move || format!("{} earlier turns", pg.history.with(Vec::len))}</span>
                </div>
                <Show when=move || !system().is_empty()>
                    <p class="turn-system" data-testid="conversation-system">
                        <strong>"System: "</strong>
                        {system}
                    </p>
                </Show>
                <ol class="turns">
                    {move || pg.history.get().into_iter().map(|t| view! { <Turn turn=t/> }).collect_view()}
                </ol>
            </section>
        </Show>
    }
}

/// One earlier turn.
#[component]
fn Turn(turn: ChatTurn) -> impl IntoView {
    let rate = turn.timings.filter(|t| t.predicted_n >= 2).map(|t| t.predicted_per_second);
    let figures = turn
        .timings
        .map(|t| format!("{} tok/s · TTFT {} · {} tokens", format::tok_per_s(rate), format::ms(Some(t.ttft_ms)), t.predicted_n));
    view! {
        <li class="turn" data-testid="turn">
            <p class="turn-user" data-testid="turn-user">{turn.user}</p>
            <div class="turn-assistant markdown" data-testid="turn-assistant" inner_html=markdown::render(&turn.assistant)></div>
            {figures.map(|f| view! { <p class="turn-figures" data-testid="turn-figures">{f}</p> })}
        </li>
    }
}

//! Generate / Stop / Share (and a chat's Regenerate, Edit, New chat), the run's
//! status line (queued, streaming, done, stopped, error with Retry) and the share
//! link once made.

use leptos::html;
use leptos::prelude::*;
use peregrine_api::playground::Mode;
use peregrine_frontend::run::{Phase, RunError, RunState};
use wasm_bindgen::JsCast;

use crate::state::{FocusTarget, Playground, ShareLink};

fn active_element_is(el: Option<web_sys::HtmlButtonElement>) -> bool {
    let doc = document();
    match (doc.active_element(), el) {
        (None, _) => true,
        (Some(active), Some(el)) => active == *el.unchecked_ref::<web_sys::Element>() || Some(active) == doc.body().map(Into::into),
        (Some(active), None) => Some(active) == doc.body().map(Into::into),
    }
}

/// The run buttons and what the run is doing.
#[component]
pub fn Controls() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let generate_ref = NodeRef::<html::Button>::new();
    let stop_ref = NodeRef::<html::Button>::new();
    let active = move || pg.run.with(RunState::is_active);

    // Focus follows the run: Generate → Stop while it runs, back when it ends, but
    // only when focus sat on the button that just got disabled.
    Effect::new(move |_| {
        let Some(target) = pg.focus.get() else { return };
        pg.focus.set(None);
        request_animation_frame(move || match target {
            FocusTarget::Stop => {
                if active_element_is(generate_ref.get_untracked()) {
                    if let Some(b) = stop_ref.get_untracked() {
                        let _ = b.focus();
                    }
                }
            }
            FocusTarget::Generate => {
                if active_element_is(stop_ref.get_untracked()) {
                    if let Some(b) = generate_ref.get_untracked() {
                        let _ = b.focus();
                    }
                }
            }
            FocusTarget::Prompt => {
                if let Some(el) = document().get_element_by_id("prompt") {
                    let _ = el.unchecked_into::<web_sys::HtmlElement>().focus();
                }
            }
            FocusTarget::Field(field) => {
                if let Some(el) = document().get_element_by_id(super::settings::field_id(field)) {
                    let _ = el.unchecked_into::<web_sys::HtmlElement>().focus();
                }
            }
        });
    });

    let status = move || {
        pg.run.with(|r| match &r.phase {
            Phase::Idle => "Ready. Press Generate or Ctrl/⌘+Enter.".to_string(),
            Phase::Connecting => "Sending the request…".to_string(),
            Phase::Queued { position: 0 } => "Queued: next in line, waiting for the running request to finish.".to_string(),
            Phase::Queued { position } => format!("Queued: {position} requests ahead of yours."),
            Phase::Streaming if r.tokens == 0 => "Reading the prompt…".to_string(),
            Phase::Streaming => "Generating…".to_string(),
            Phase::Done { .. } | Phase::Stopped => r.summary().unwrap_or_default(),
            Phase::Failed(e) => e.describe(),
        })
    };
    let queue_position = move || pg.run.with(|r| if let Phase::Queued { position } = r.phase { Some(position + 1) } else { None });
    let failed = move || pg.run.with(|r| matches!(r.phase, Phase::Failed(_)));
    let busy = move || pg.run.with(|r| matches!(r.phase, Phase::Failed(RunError::Busy { .. })));
    let invalid = move || pg.show_errors.get() && pg.form.with(|f| !f.errors().is_empty());
    let chat = move || pg.mode.get() == Mode::Chat;
    let run_label = move || match (pg.has_shared_run(), chat()) {
        (true, _) => "Run",
        (false, true) => "Send",
        (false, false) => "Generate",
    };
    // Regenerate and Edit act on the last answer, which is the current run.
    let last_turn =
        move || pg.run.with(|r| r.mode == Mode::Chat && !r.is_active() && !r.prompt.is_empty() && !matches!(r.phase, Phase::Idle));
    let has_conversation = move || pg.history.with(|h| !h.is_empty()) || last_turn();

    view! {
        <div class="controls">
            <button
                type="button"
                class="primary"
                data-testid="generate"
                node_ref=generate_ref
                aria-keyshortcuts="Control+Enter Meta+Enter"
                disabled=active
                on:click=move |_| pg.start()
            >
                {run_label}
            </button>
            <button
                type="button"
                data-testid="stop"
                node_ref=stop_ref
                aria-keyshortcuts="Escape"
                disabled=move || !active()
                on:click=move |_| pg.stop()
            >
                "Stop"
            </button>
            <button
                type="button"
                data-testid="share"
                disabled=move || matches!(pg.share_link.get(), ShareLink::Saving)
                on:click=move |_| pg.share()
            >
                "Share"
            </button>
        </div>
        <Show when=chat>
            <div class="controls chat-controls" data-testid="chat-controls">
                <button type="button" data-testid="regenerate" disabled=move || !last_turn() on:click=move |_| pg.regenerate()>
                    "Regenerate"
                </button>
                <button type="button" data-testid="edit-last" disabled=move || !last_turn() on:click=move |_| pg.edit_last()>
                    "Edit last message"
                </button>
                <button
                    type="button"
                    data-testid="new-chat"
                    disabled=move || !has_conversation() || active()
                    on:click=move |_| pg.new_chat()
                >
                    "New chat"
                </button>
            </div>
        </Show>
        <p class="status" role="status" data-testid="status" data-state=move || pg.run.with(RunState::state_name)
            data-queue-position=move || queue_position().map(|p| p.to_string())>
            {status}
        </p>
        <Show when=failed>
            <div class="alert" role="alert" data-testid="run-error">
                <span>{move || if busy() { "The server is busy." } else { "The run failed." }}</span>
                <button type="button" data-testid="retry" on:click=move |_| pg.start()>"Retry"</button>
            </div>
        </Show>
        <Show when=invalid>
            <p class="alert" role="alert" data-testid="settings-error">"Fix the settings marked below before running."</p>
        </Show>
        <ShareBox/>
    }
}

/// The share link after Share, with whether it reached the clipboard.
#[component]
fn ShareBox() -> impl IntoView {
    let pg = expect_context::<Playground>();
    move || match pg.share_link.get() {
        ShareLink::Idle => ().into_any(),
        ShareLink::Saving => view! { <p class="share-box" role="status">"Saving the share link…"</p> }.into_any(),
        ShareLink::Failed(message) => view! { <p class="alert" role="alert" data-testid="share-error">{message}</p> }.into_any(),
        ShareLink::Ready { url, copied, with_run } => {
            let note = match (copied, with_run) {
                (true, true) => "Copied to the clipboard. It includes this run's output and speed.",
                (true, false) => "Copied to the clipboard.",
                (false, true) => "Copy it from the box. It includes this run's output and speed.",
                (false, false) => "Copy it from the box.",
            };
            view! {
                <div class="share-box">
                    <label for="share-url">"Share link"</label>
                    <input
                        id="share-url"
                        data-testid="share-url"
                        type="text"
                        readonly
                        prop:value=url
                        on:focus=move |e| {
                            if let Some(input) = e.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) {
                                input.select();
                            }
                        }
                    />
                    <span role="status" class="share-note">{note}</span>
                </div>
            }
            .into_any()
        }
    }
}

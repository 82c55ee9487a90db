//! The prompt editor: examples, mode switch (fill-in-the-middle where the model can),
//! highlight language, a chat's system prompt, and a monospace text area where Tab
//! indents (Esc then Tab, or Shift+Tab, leaves it) and, in infill mode, the caret
//! marks where the middle goes.

use leptos::prelude::*;
use peregrine_api::playground::Mode;
use peregrine_frontend::examples::EXAMPLES;
use peregrine_frontend::fill;
use peregrine_frontend::highlight::{self, LANGUAGES};
use wasm_bindgen::JsCast;
use web_sys::{Event, HtmlTextAreaElement, KeyboardEvent};

use crate::state::Playground;

/// Spaces a Tab inserts.
const INDENT: &str = "    ";

/// Prompt, mode and examples.
#[component]
pub fn Editor() -> impl IntoView {
    let pg = expect_context::<Playground>();
    // Esc arms "leave": the next Tab moves focus instead of indenting (no keyboard trap).
    let leave_armed = StoredValue::new(false);
    let on_keydown = move |e: KeyboardEvent| {
        let plain_tab = e.key() == "Tab" && !e.shift_key() && !e.ctrl_key() && !e.alt_key() && !e.meta_key();
        if plain_tab && !leave_armed.get_value() {
            e.prevent_default();
            if let Some(ta) = e.target().and_then(|t| t.dyn_into::<HtmlTextAreaElement>().ok()) {
                let start = ta.selection_start().ok().flatten().unwrap_or(0);
                let end = ta.selection_end().ok().flatten().unwrap_or(start);
                if ta.set_range_text_with_start_and_end(INDENT, start, end).is_ok() {
                    let caret = start + INDENT.len() as u32;
                    let _ = ta.set_selection_range(caret, caret);
                    pg.prompt.set(ta.value());
                    pg.caret.set(caret);
                }
            }
        }
        leave_armed.set_value(e.key() == "Escape");
    };
    let on_example = move |e: leptos::ev::Event| {
        let label = event_target_value(&e);
        if let Some(ex) = EXAMPLES.iter().find(|x| x.label == label) {
            pg.prompt.set(ex.prompt.to_string());
            pg.prompt_error.set(None);
            pg.mode.set(ex.mode);
            pg.language.set("auto".into());
        }
    };
    let detected = move || format!("Auto ({})", pg.prompt.with(|p| highlight::guess_language(p)));
    let track_caret = move |e: Event| {
        if let Some(ta) = e.target().and_then(|t| t.dyn_into::<HtmlTextAreaElement>().ok()) {
            pg.caret.set(ta.selection_start().ok().flatten().unwrap_or(0));
        }
    };
    let can_infill = move || pg.info.with(|i| i.as_ref().is_some_and(|i| i.infill));
    // A remembered or shared infill on a model without FIM tokens becomes a completion.
    Effect::new(move |_| {
        if pg.info.with(|i| i.as_ref().is_some_and(|i| !i.infill)) && pg.mode.get_untracked() == Mode::Infill {
            pg.mode.set(Mode::Complete);
        }
    });
    let chat = move || pg.mode.get() == Mode::Chat;
    let infill = move || pg.mode.get() == Mode::Infill;
    let caret_place = move || {
        let (before, _) = pg.prompt.with(|p| fill::split_at_caret(p, pg.caret.get()));
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("The middle is written at the cursor: line {line}, column {column}.")
    };
    view! {
        <div class="editor">
            <div class="editor-bar">
                <fieldset class="mode" data-testid="mode">
                    <legend>"Mode"</legend>
                    <label>
                        <input
                            type="radio"
                            name="mode"
                            value="complete"
                            data-testid="mode-complete"
                            prop:checked=move || pg.mode.get() == Mode::Complete
                            on:change=move |_| pg.mode.set(Mode::Complete)
                        />
                        "Code completion"
                    </label>
                    <label>
                        <input
                            type="radio"
                            name="mode"
                            value="chat"
                            data-testid="mode-chat"
                            prop:checked=move || pg.mode.get() == Mode::Chat
                            on:change=move |_| pg.mode.set(Mode::Chat)
                        />
                        "Chat"
                    </label>
                    <Show
                        when=can_infill
                        fallback=|| view! { <span class="hint" data-testid="infill-unavailable">"Fill in the middle: this model has no FIM tokens."</span> }
                    >
                        <label>
                            <input
                                type="radio"
                                name="mode"
                                value="infill"
                                data-testid="mode-infill"
                                prop:checked=move || pg.mode.get() == Mode::Infill
                                on:change=move |_| pg.mode.set(Mode::Infill)
                            />
                            "Fill in the middle"
                        </label>
                    </Show>
                </fieldset>
                <div class="field inline">
                    <label for="examples">"Example"</label>
                    <select id="examples" data-testid="examples" on:change=on_example>
                        <option value="">"Choose…"</option>
                        {EXAMPLES.iter().map(|ex| view! { <option value=ex.label>{ex.label}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field inline">
                    <label for="language">"Highlight"</label>
                    <select
                        id="language"
                        data-testid="language"
                        prop:value=move || pg.language.get()
                        on:change=move |e| pg.language.set(event_target_value(&e))
                    >
                        <option value="auto">{detected}</option>
                        {LANGUAGES.iter().map(|(label, name)| view! { <option value=*name>{*label}</option> }).collect_view()}
                    </select>
                </div>
            </div>
            <Show when=chat>
                <label for="system" class="prompt-label">"System prompt"</label>
                <textarea
                    id="system"
                    data-testid="system"
                    class="system"
                    rows="2"
                    placeholder="Optional: how the assistant should answer"
                    prop:value=move || pg.system.get()
                    on:input=move |e| pg.system.set(event_target_value(&e))
                ></textarea>
            </Show>
            <label for="prompt" class="prompt-label">{move || if chat() { "Message" } else { "Prompt" }}</label>
            <textarea
                id="prompt"
                data-testid="prompt"
                class="prompt"
                spellcheck="false"
                autocapitalize="off"
                autocomplete="off"
                rows="12"
                aria-describedby="editor-help prompt-error"
                aria-invalid=move || pg.prompt_error.with(Option::is_some).to_string()
                prop:value=move || pg.prompt.get()
                on:input=move |e| {
                    pg.prompt.set(event_target_value(&e));
                    pg.prompt_error.set(None);
                    track_caret(e);
                }
                on:keydown=on_keydown
                on:keyup=move |e| track_caret(e.into())
                on:click=move |e| track_caret(e.into())
                on:select=track_caret
            ></textarea>
            <Show when=infill>
                <p class="hint" data-testid="infill-hint" aria-live="polite">{caret_place}</p>
            </Show>
            <span class="field-error" id="prompt-error" data-testid="prompt-error" aria-live="polite">
                {move || pg.prompt_error.get().unwrap_or_default()}
            </span>
            <p id="editor-help" class="hint">
                <kbd>"Tab"</kbd> " indents · " <kbd>"Esc"</kbd> " then " <kbd>"Tab"</kbd> " leaves the editor · "
                <kbd>"Ctrl/⌘+Enter"</kbd> " runs · " <kbd>"Esc"</kbd> " stops"
            </p>
        </div>
    }
}

//! The streamed output: code highlighted in the context of its prompt, an infill
//! in place between its prefix and suffix, chat answers as sanitised markdown, a copy
//! button, and (for a run with a JSON schema) whether the answer validates.

use leptos::prelude::*;
use leptos::task::spawn_local;
use peregrine_api::playground::Mode;
use peregrine_frontend::run::RunState;
use peregrine_frontend::schema_check::Verdict;
use peregrine_frontend::{fill, highlight, markdown};

use crate::client;
use crate::state::Playground;

/// HTML for an output: markdown for chat, highlighted code for completions, the
/// middle marked between `prompt` and `suffix` for an infill.
pub fn render_output(mode: Mode, language: &str, prompt: &str, output: &str, suffix: &str) -> String {
    if output.is_empty() {
        return String::new();
    }
    match mode {
        Mode::Chat => markdown::render(output),
        Mode::Complete => format!("<pre class=\"code\"><code>{}</code></pre>", highlight::highlight_continuation(language, prompt, output)),
        Mode::Infill => fill::render(language, prompt, output, suffix),
    }
}

/// The current run's output.
#[component]
pub fn Output() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let copied = RwSignal::new(false);
    let html = Memo::new(move |_| {
        let language = pg.effective_language();
        pg.run.with(|r| render_output(r.mode, &language, &r.prompt, &r.output, &r.suffix))
    });
    let empty = move || pg.run.with(|r| r.output.is_empty());
    let active = move || pg.run.with(RunState::is_active);
    let copy = move |_| {
        let text = pg.run.with_untracked(|r| r.output.clone());
        spawn_local(async move {
            copied.set(client::copy_text(&text).await);
        });
    };
    Effect::new(move |_| {
        pg.run.track();
        copied.set(false);
    });
    view! {
        <section class="panel output-panel" aria-labelledby="output-heading">
            <div class="panel-head">
                <h2 id="output-heading">"Output"</h2>
                <span class="panel-note">
                    {move || if pg.run.with(|r| r.mode == Mode::Chat) { "markdown".to_string() } else { pg.effective_language() }}
                </span>
                <button type="button" class="small" data-testid="copy" disabled=empty on:click=copy>
                    {move || if copied.get() { "Copied" } else { "Copy" }}
                </button>
            </div>
            <div
                class="output"
                class:markdown=move || pg.run.with(|r| r.mode == Mode::Chat)
                class:streaming=active
                data-testid="output"
                tabindex="0"
                role="region"
                aria-labelledby="output-heading"
                aria-busy=move || active().to_string()
                inner_html=move || html.get()
            ></div>
            {move || pg.run.with(RunState::schema_verdict).map(|v| {
                let (ok, text) = match v {
                    Verdict::Valid { unchecked } if unchecked.is_empty() => (true, "The answer validates against the JSON schema.".to_string()),
                    Verdict::Valid { unchecked } => {
                        (true, format!("The answer validates against the JSON schema (not checked here: {}).", unchecked.join(", ")))
                    }
                    Verdict::Invalid(why) => (false, format!("The answer does not validate against the JSON schema: {why}.")),
                };
                view! {
                    <p class="schema-verdict" class:invalid=!ok data-testid="schema-verdict" data-valid=ok.to_string() role="status">{text}</p>
                }
            })}
        </section>
    }
}

//! Recent runs (localStorage) with their speeds, newest first.

use leptos::prelude::*;
use peregrine_frontend::format;

use crate::state::Playground;

/// The list of recent runs.
#[component]
pub fn RecentRuns() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let empty = move || pg.recent.with(Vec::is_empty);
    view! {
        <section class="panel recent" data-testid="recent-runs" aria-labelledby="recent-heading">
            <div class="panel-head">
                <h2 id="recent-heading">"Recent runs"</h2>
                <button type="button" class="small" data-testid="clear-recent" disabled=empty on:click=move |_| pg.clear_recent()>
                    "Clear"
                </button>
            </div>
            <Show when=move || !empty() fallback=|| view! { <p class="placeholder">"Finished runs appear here with their speeds."</p> }>
                <ol class="recent-list">
                    {move || {
                        pg.recent
                            .get()
                            .into_iter()
                            .map(|r| {
                                let when = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(r.at_ms)).to_locale_time_string("en-GB");
                                view! {
                                    <li data-testid="recent-run">
                                        <span class="recent-speed">{format!("{} tok/s", format::tok_per_s(r.tok_per_s))}</span>
                                        <span>{format!("{} tokens", r.tokens)}</span>
                                        <span>{format!("TTFT {}", format::ms(r.ttft_ms))}</span>
                                        <span>{format::seconds(r.elapsed_ms)}</span>
                                        <code class="recent-prompt">{r.prompt.clone()}</code>
                                        <span class="recent-meta">{format!("{} · {} · {} · {}", String::from(when), r.mode, r.outcome, r.backend)}</span>
                                    </li>
                                }
                            })
                            .collect_view()
                    }}
                </ol>
            </Show>
        </section>
    }
}

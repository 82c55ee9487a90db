//! The API-key form, shown when the server refuses a request for its key: the key
//! is kept in localStorage and sent with every request after.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use crate::state::Playground;

/// Asks for the server's API key.
#[component]
pub fn ApiKeyPrompt() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let key = RwSignal::new(String::new());
    let submit = move |e: SubmitEvent| {
        e.prevent_default();
        let typed = key.get_untracked();
        if !typed.trim().is_empty() {
            pg.save_api_key(&typed);
            key.set(String::new());
        }
    };
    move || {
        pg.key_prompt.get().map(|message| {
            view! {
                <form class="notice api-key" role="alert" data-testid="api-key-form" on:submit=submit>
                    <p>
                        <strong>"This server needs an API key. "</strong>
                        <span data-testid="api-key-message">{message}</span>
                    </p>
                    <label for="api-key">"API key"</label>
                    <div class="api-key-row">
                        <input
                            id="api-key"
                            type="password"
                            autocomplete="off"
                            spellcheck="false"
                            data-testid="api-key-input"
                            prop:value=move || key.get()
                            on:input=move |e| key.set(event_target_value(&e))
                        />
                        <button type="submit" data-testid="api-key-save">"Use key"</button>
                    </div>
                    <p class="hint">"Kept in this browser (localStorage) and sent as a Bearer token with every request."</p>
                </form>
            }
        })
    }
}

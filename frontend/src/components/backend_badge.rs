//! The backend badge from `/api/info`, e.g. "CPU · SmolLM2 135M Instruct".

use leptos::prelude::*;

use crate::state::Playground;

/// Which hardware and model answer this page.
#[component]
pub fn BackendBadge() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let text = move || match (pg.badge(), pg.info_error.get()) {
        (Some(badge), _) => badge,
        (None, Some(_)) if pg.key_prompt.with(Option::is_some) => "API key needed".to_string(),
        (None, Some(_)) => "Server unreachable".to_string(),
        (None, None) => "Connecting…".to_string(),
    };
    let title = move || {
        pg.info.with(|i| {
            i.as_ref().map(|i| {
                format!(
                    "{} ({}, {} parameters, {} context) on {}",
                    i.model,
                    i.architecture,
                    peregrine_frontend::format::parameters(i.parameters),
                    i.context_length,
                    i.devices.join(", ")
                )
            })
        })
    };
    view! {
        <p class="badge" data-testid="backend" title=title class:offline=move || pg.info_error.with(Option::is_some)>
            <span class="visually-hidden">"Running on "</span>
            {text}
        </p>
    }
}

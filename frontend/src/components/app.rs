//! The root component: page frame with the product name.

use leptos::prelude::*;

/// The whole playground page.
#[component]
pub fn App() -> impl IntoView {
    view! {
        <header class="topbar">
            <h1 data-testid="title">"Peregrine"</h1>
            <p class="tagline">"The fastest single-request LLM inference, made visible."</p>
        </header>
        <main class="playground" data-testid="playground"></main>
    }
}

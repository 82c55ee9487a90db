//! The root component: provides the shared state, wires the page-wide shortcuts
//! (Ctrl/Cmd+Enter runs, Esc stops) and lays the page out.

use leptos::ev;
use leptos::prelude::*;
use peregrine_frontend::run::RunState;

use super::api_key::ApiKeyPrompt;
use super::backend_badge::BackendBadge;
use super::controls::Controls;
use super::conversation::Conversation;
use super::counters::Counters;
use super::editor::Editor;
use super::output::Output;
use super::recent_runs::RecentRuns;
use super::settings::Settings;
use super::share_notice::ShareNotice;
use super::shared_run::SharedRunPanel;
use crate::state::Playground;

/// The whole playground page.
#[component]
pub fn App() -> impl IntoView {
    let pg = Playground::provide();
    pg.load_info();
    pg.restore_share_from_path();

    let keys = window_event_listener(ev::keydown, move |e| {
        if e.key() == "Enter" && (e.ctrl_key() || e.meta_key()) {
            e.prevent_default();
            pg.start();
        } else if e.key() == "Escape" && pg.run.with_untracked(RunState::is_active) {
            e.prevent_default();
            pg.stop();
        }
    });
    // The stream in flight is closed with the page's root.
    on_cleanup(move || {
        keys.remove();
        pg.abort_request();
    });

    view! {
        <a class="skip-link" href="#prompt">"Skip to the editor"</a>
        <header class="topbar">
            <h1 data-testid="title">"Peregrine"</h1>
            <p class="tagline">"The fastest single-request LLM inference, made visible."</p>
            <BackendBadge/>
        </header>
        <main class="playground" data-testid="playground">
            <ApiKeyPrompt/>
            <ShareNotice/>
            <div class="columns">
                <section class="input-pane" aria-label="Prompt and settings">
                    <Editor/>
                    <Controls/>
                    <Settings/>
                </section>
                <section class="output-pane" aria-label="Output and speed">
                    <Counters/>
                    <Conversation/>
                    <div class="race" class:racing=move || pg.has_shared_run()>
                        <Output/>
                        <SharedRunPanel/>
                    </div>
                    <RecentRuns/>
                </section>
            </div>
        </main>
    }
}

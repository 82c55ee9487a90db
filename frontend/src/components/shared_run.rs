//! A shared link's run, shown beside the visitor's own run so they can race it.

use leptos::prelude::*;
use peregrine_api::playground::Mode;
use peregrine_frontend::format;
use peregrine_frontend::run::Phase;

use super::output::render_output;
use crate::state::{Playground, ShareView};

/// The shared run's output and figures, and how the visitor's run compares.
#[component]
pub fn SharedRunPanel() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let shared = move || {
        pg.shared.with(|s| match s {
            ShareView::Loaded(share) => {
                share.share.run.clone().map(|run| (share.share.prompt.clone(), share.share.mode, run, share.share.around.suffix.clone()))
            }
            _ => None,
        })
    };
    move || {
        shared().map(|(prompt, mode, run, suffix)| {
            let t = run.timings;
            let theirs = (t.predicted_n >= 2).then_some(t.predicted_per_second);
            let language = pg.effective_language();
            let html = render_output(mode, &language, &prompt, &run.output, &suffix);
            let compare = move || {
                pg.run.with(|r| {
                    if !matches!(r.phase, Phase::Done { .. }) {
                        return None;
                    }
                    let mine = r.tok_per_s()?;
                    let theirs = theirs?;
                    let ratio = format::speed_ratio(mine, theirs)?;
                    Some(format!(
                        "Your run: {} tok/s, {ratio} the shared run ({} tok/s).",
                        format::tok_per_s(Some(mine)),
                        format::tok_per_s(Some(theirs))
                    ))
                })
            };
            let device = if run.device.is_empty() { run.backend.to_uppercase() } else { run.device.clone() };
            view! {
                <section class="panel shared-run" data-testid="shared-run" aria-labelledby="shared-heading">
                    <div class="panel-head">
                        <h2 id="shared-heading">"Shared run"</h2>
                        <span class="panel-note" data-testid="shared-device">{device}</span>
                    </div>
                    <dl class="mini-counters">
                        <div><dt>"Decode tok/s"</dt><dd data-testid="shared-tok-per-s">{format::tok_per_s(theirs)}</dd></div>
                        <div><dt>"TTFT"</dt><dd data-testid="shared-ttft">{format::ms(Some(t.ttft_ms))}</dd></div>
                        <div><dt>"Tokens"</dt><dd data-testid="shared-tokens">{t.predicted_n}</dd></div>
                    </dl>
                    <div
                        class="output"
                        class:markdown=mode == Mode::Chat
                        data-testid="shared-output"
                        tabindex="0"
                        role="region"
                        aria-label="Shared run output"
                        inner_html=html
                    ></div>
                    <p class="compare" data-testid="compare" aria-live="polite">
                        {move || compare().unwrap_or_else(|| "Press Run to race it on this server.".into())}
                    </p>
                </section>
            }
        })
    }
}

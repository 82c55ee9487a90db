//! The banner of a page opened from a share link: loading, restored, or a clear
//! message when the id is missing or unknown.

use leptos::prelude::*;

use crate::state::{Playground, ShareView};

/// What happened to the share link this page was opened with.
#[component]
pub fn ShareNotice() -> impl IntoView {
    let pg = expect_context::<Playground>();
    move || match pg.shared.get() {
        ShareView::None => ().into_any(),
        ShareView::Loading(id) => {
            view! { <p class="notice" role="status">{format!("Loading shared run \u{201c}{id}\u{201d}…")}</p> }.into_any()
        }
        ShareView::Loaded(share) => {
            let text = if share.share.run.is_some() {
                "Restored a shared prompt, its settings and its run. Press Run to race it and compare side by side."
            } else {
                "Restored a shared prompt and its settings. Press Run to try it."
            };
            view! { <p class="notice" role="status" data-testid="share-notice">{text}</p> }.into_any()
        }
        ShareView::Missing { message, .. } => view! {
            <div class="notice error" role="alert" data-testid="share-missing">
                <strong>"Share link not found. "</strong>
                {message}
                " "
                <a href="/">"Start a new prompt"</a>
            </div>
        }
        .into_any(),
    }
}

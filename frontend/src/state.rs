//! The playground's shared state (one context struct of signals) and the actions
//! that change it: run, stop, share, restore a share, remember settings, and a chat's
//! regenerate / edit / new conversation.

use leptos::prelude::*;
use leptos::task::spawn_local;
use peregrine_api::playground::{
    ChatTurn, GenerateRequest, GenerationParams, Mode, Share, ShareCreated, ShareRequest, SharedRun, Surroundings,
};
use peregrine_api::{FinishReason, Info};
use peregrine_frontend::recent::{self, RecentRun};
use peregrine_frontend::run::{Phase, RunError, RunState};
use peregrine_frontend::settings::{Field, Remembered, SettingsForm};
use peregrine_frontend::{conversation, fill, highlight};
use web_sys::AbortController;

use crate::client::{self, FetchError};

/// What the page knows about a share link it was opened with.
#[derive(Debug, Clone, PartialEq)]
pub enum ShareView {
    /// The page was not opened from a share link.
    None,
    /// Fetching `/api/shares/{id}`.
    Loading(String),
    /// Restored; the run inside (if any) is shown as "shared run".
    Loaded(Box<Share>),
    /// No such share, or no id in the link.
    Missing { id: String, message: String },
}

/// The Share button's outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum ShareLink {
    Idle,
    Saving,
    /// Saved at `url`; `copied` says whether it reached the clipboard.
    Ready {
        url: String,
        copied: bool,
        with_run: bool,
    },
    Failed(String),
}

/// Every signal the components share.
#[derive(Clone, Copy)]
pub struct Playground {
    pub prompt: RwSignal<String>,
    pub mode: RwSignal<Mode>,
    /// Chat: the system prompt and the turns before the current run.
    pub system: RwSignal<String>,
    pub history: RwSignal<Vec<ChatTurn>>,
    /// Infill: the editor's caret (UTF-16 units), where the middle goes.
    pub caret: RwSignal<u32>,
    /// "auto" or a syntax name from `highlight::LANGUAGES`.
    pub language: RwSignal<String>,
    pub form: RwSignal<SettingsForm>,
    /// Why the prompt cannot run, set when the user tries to run it.
    pub prompt_error: RwSignal<Option<String>>,
    /// Whether the user asked to run with invalid settings (errors then show even untouched).
    pub show_errors: RwSignal<bool>,
    pub run: RwSignal<RunState>,
    pub info: RwSignal<Option<Info>>,
    pub info_error: RwSignal<Option<String>>,
    /// The server wants an API key: what to tell the user (a refused key says so).
    pub key_prompt: RwSignal<Option<String>>,
    pub recent: RwSignal<Vec<RecentRun>>,
    pub shared: RwSignal<ShareView>,
    pub share_link: RwSignal<ShareLink>,
    /// Aborts the request in flight.
    abort: StoredValue<Option<AbortController>, LocalStorage>,
    /// Bumped per run, so a stale stream never writes into a newer run.
    run_seq: StoredValue<u64>,
    /// Where focus goes after a run ends, and the first invalid field on a bad run.
    pub focus: RwSignal<Option<FocusTarget>>,
}

/// Elements that actions move focus to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FocusTarget {
    Prompt,
    Stop,
    Generate,
    Field(Field),
}

impl Playground {
    /// Creates the state from localStorage and provides it as context.
    pub fn provide() -> Self {
        let remembered = Remembered::from_json(client::load(peregrine_frontend::settings::STORAGE_KEY).as_deref());
        let first = peregrine_frontend::examples::EXAMPLES[0];
        let pg = Playground {
            prompt: RwSignal::new(remembered.prompt.clone().unwrap_or_else(|| first.prompt.to_string())),
            mode: RwSignal::new(remembered.mode),
            system: RwSignal::new(String::new()),
            history: RwSignal::new(Vec::new()),
            caret: RwSignal::new(0),
            language: RwSignal::new(if remembered.language.is_empty() { "auto".into() } else { remembered.language.clone() }),
            form: RwSignal::new(SettingsForm::from_params(&remembered.params)),
            prompt_error: RwSignal::new(None),
            show_errors: RwSignal::new(false),
            run: RwSignal::new(RunState::default()),
            info: RwSignal::new(None),
            info_error: RwSignal::new(None),
            key_prompt: RwSignal::new(None),
            recent: RwSignal::new(recent::from_json(client::load(recent::STORAGE_KEY).as_deref())),
            shared: RwSignal::new(ShareView::None),
            share_link: RwSignal::new(ShareLink::Idle),
            abort: StoredValue::new_local(None),
            run_seq: StoredValue::new(0),
            focus: RwSignal::new(None),
        };
        provide_context(pg);
        client::on_unauthorized(move |message| {
            let said = match client::api_key() {
                Some(_) => format!("The saved key was refused ({message})."),
                None => "Enter the key this server's operator gave you.".to_string(),
            };
            pg.key_prompt.set(Some(said));
        });
        pg.remember_settings();
        pg
    }

    /// Saves prompt, mode, language and (valid) settings whenever they change.
    fn remember_settings(self) {
        Effect::new(move |_| {
            let params = self.form.with(|f| f.params().ok());
            let mut r = Remembered::from_json(client::load(peregrine_frontend::settings::STORAGE_KEY).as_deref());
            r.mode = self.mode.get();
            r.language = self.language.get();
            r.prompt = Some(self.prompt.get());
            if let Some(p) = params {
                r.params = p;
            }
            client::save(peregrine_frontend::settings::STORAGE_KEY, &r.to_json());
        });
    }

    /// The syntax the output is highlighted with.
    pub fn effective_language(&self) -> String {
        let chosen = self.language.get();
        if chosen == "auto" {
            self.prompt.with(|p| highlight::guess_language(p)).to_string()
        } else {
            chosen
        }
    }

    /// Whether the page shows a shared run to race.
    pub fn has_shared_run(&self) -> bool {
        self.shared.with(|s| matches!(s, ShareView::Loaded(share) if share.share.run.is_some()))
    }

    /// The backend badge text, once `/api/info` answered.
    pub fn badge(&self) -> Option<String> {
        self.info.with(|i| i.as_ref().map(peregrine_frontend::format::backend_badge))
    }

    /// Loads `/api/info` for the backend badge.
    pub fn load_info(self) {
        spawn_local(async move {
            match client::get_json::<Info>("/api/info").await {
                Ok(info) => self.info.set(Some(info)),
                Err(e) => self.info_error.set(Some(match e {
                    FetchError::Network(m) => m,
                    FetchError::Status { error, .. } => error.message,
                    FetchError::Aborted => "aborted".into(),
                })),
            }
        });
    }

    /// Keeps the API key the user typed and loads what the missing key held back.
    pub fn save_api_key(self, key: &str) {
        client::save(client::API_KEY_STORAGE, key.trim());
        self.key_prompt.set(None);
        self.info_error.set(None);
        self.load_info();
        if !matches!(self.shared.get_untracked(), ShareView::None | ShareView::Loaded(_)) {
            self.restore_share_from_path();
        }
    }

    /// Starts a run of the current prompt and settings (Generate, Ctrl/Cmd+Enter,
    /// Retry). Invalid settings stop it here, with the first bad field focused. In chat
    /// mode a finished answer first joins the conversation; in infill mode the caret
    /// splits the editor into the text before and after the middle.
    pub fn start(self) {
        if self.run.with_untracked(RunState::is_active) {
            return;
        }
        let Some((params, prompt)) = self.checked_input() else { return };
        let mode = self.mode.get_untracked();
        let (prompt, around) = match mode {
            Mode::Complete => (prompt, Surroundings::default()),
            Mode::Chat => {
                let history = self.run.with_untracked(|r| self.history.with_untracked(|h| conversation::with_current(h, r)));
                self.history.set(history.clone());
                (prompt, Surroundings { system: self.system.get_untracked(), history, ..Surroundings::default() })
            }
            Mode::Infill => {
                let (prefix, suffix) = fill::split_at_caret(&prompt, self.caret.get_untracked());
                (prefix, Surroundings { suffix, ..Surroundings::default() })
            }
        };
        self.launch(GenerateRequest { prompt, mode, params, cache_prompt: None, speculative: Default::default(), json_schema: self.form.with_untracked(|f| f.schema().ok().flatten()), around });
    }

    /// Chat: the last message again after the same conversation (a new answer).
    pub fn regenerate(self) {
        if self.run.with_untracked(RunState::is_active) {
            return;
        }
        let Some(prompt) = self.run.with_untracked(|r| (r.mode == Mode::Chat && !r.prompt.is_empty()).then(|| r.prompt.clone())) else {
            return;
        };
        let Some(params) = self.checked_params() else { return };
        let around = Surroundings { system: self.system.get_untracked(), history: self.history.get_untracked(), ..Surroundings::default() };
        self.launch(GenerateRequest { prompt, mode: Mode::Chat, params, cache_prompt: None, speculative: Default::default(), json_schema: self.form.with_untracked(|f| f.schema().ok().flatten()), around });
    }

    /// Chat: the last message back in the editor, its answer dropped, so sending it
    /// again replaces the last turn.
    pub fn edit_last(self) {
        if self.run.with_untracked(RunState::is_active) {
            return;
        }
        let Some(prompt) = self.run.with_untracked(|r| (r.mode == Mode::Chat && !r.prompt.is_empty()).then(|| r.prompt.clone())) else {
            return;
        };
        self.prompt.set(prompt);
        self.run.set(RunState::default());
        self.focus.set(Some(FocusTarget::Prompt));
    }

    /// Chat: forgets the conversation (the system prompt stays).
    pub fn new_chat(self) {
        if self.run.with_untracked(RunState::is_active) {
            return;
        }
        self.history.set(Vec::new());
        self.run.set(RunState::default());
        self.share_link.set(ShareLink::Idle);
        self.focus.set(Some(FocusTarget::Prompt));
    }

    /// Sends `request` and streams its events into the run.
    fn launch(self, request: GenerateRequest) {
        let prompt = request.prompt.clone();
        let controller = AbortController::new().ok();
        let signal = controller.as_ref().map(|c| c.signal());
        self.abort.set_value(controller);
        let seq = self.run_seq.with_value(|s| s + 1);
        self.run_seq.set_value(seq);
        self.run.set(RunState { suffix: request.around.suffix.clone(), schema: request.json_schema.clone(), ..RunState::connecting(&prompt, request.mode) });
        self.share_link.set(ShareLink::Idle);
        self.focus.set(Some(FocusTarget::Stop));
        let Some(signal) = signal else {
            self.run.update(|r| r.fail(RunError::Network { message: "this browser cannot abort requests".into() }));
            return;
        };
        spawn_local(async move {
            let current = move || self.run_seq.with_value(|s| *s == seq);
            let result = client::generate(&request, &signal, |events| {
                if !current() {
                    return;
                }
                self.run.update(|r| {
                    for event in events {
                        match event {
                            Ok(e) => r.apply(e),
                            Err(message) => r.fail(RunError::Server { code: "bad_event".into(), message }),
                        }
                    }
                });
            })
            .await;
            if !current() {
                return;
            }
            match result {
                Ok(()) => self.run.update(RunState::stream_ended),
                Err(e) => {
                    if let Some(error) = e.into_run_error() {
                        self.run.update(|r| r.fail(error));
                    }
                }
            }
            self.abort.set_value(None);
            self.finish();
        });
    }

    /// Stops the run in flight (Stop, Esc): no further output is shown.
    pub fn stop(self) {
        if !self.run.with_untracked(RunState::is_active) {
            return;
        }
        self.run_seq.update_value(|s| *s += 1);
        self.run.update(RunState::stop);
        self.abort_request();
        self.finish();
    }

    /// Closes the stream in flight, if any (also on unmount).
    pub fn abort_request(self) {
        if let Some(c) = self.abort.try_update_value(|a| a.take()).flatten() {
            c.abort();
        }
    }

    /// After a run ends: remember it and hand focus back to Generate.
    fn finish(self) {
        let run = self.run.get_untracked();
        let outcome = match &run.phase {
            Phase::Done { finish_reason } => match finish_reason {
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
                FinishReason::Cancelled => "cancelled",
            },
            Phase::Stopped if run.tokens > 0 => "stopped",
            _ => "",
        };
        if !outcome.is_empty() {
            let entry = RecentRun {
                at_ms: client::now_ms(),
                prompt: recent::excerpt(&run.prompt),
                mode: match run.mode {
                    Mode::Complete => "complete".into(),
                    Mode::Chat => "chat".into(),
                    Mode::Infill => "infill".into(),
                },
                tokens: run.tokens,
                tok_per_s: run.tok_per_s(),
                ttft_ms: run.ttft_ms(),
                elapsed_ms: run.elapsed_ms(),
                outcome: outcome.into(),
                backend: self.info.with_untracked(|i| i.as_ref().map(peregrine_frontend::format::backend_badge)).unwrap_or_default(),
            };
            self.recent.update(|runs| recent::push(runs, entry));
            self.recent.with_untracked(|runs| client::save(recent::STORAGE_KEY, &recent::to_json(runs)));
        }
        // A chat answer is in: the editor is ready for the next message.
        if run.mode == Mode::Chat && matches!(run.phase, Phase::Done { .. }) {
            self.prompt.set(String::new());
        }
        self.focus.set(Some(FocusTarget::Generate));
    }

    /// Clears the recent runs.
    pub fn clear_recent(self) {
        self.recent.set(Vec::new());
        client::save(recent::STORAGE_KEY, "[]");
    }

    /// The settings when they are valid; otherwise shows the errors and focuses the
    /// first bad field.
    fn checked_params(self) -> Option<GenerationParams> {
        match self.form.with_untracked(SettingsForm::params) {
            Ok(p) => Some(p),
            Err(errors) => {
                self.show_errors.set(true);
                self.focus.set(errors.first().map(|(f, _)| FocusTarget::Field(*f)));
                None
            }
        }
    }

    /// The settings and prompt when both are valid; otherwise shows the errors and
    /// focuses the first bad field (nothing is sent).
    fn checked_input(self) -> Option<(GenerationParams, String)> {
        let params = self.checked_params()?;
        let prompt = self.prompt.get_untracked();
        if let Some(message) = peregrine_frontend::settings::prompt_error(&prompt) {
            self.prompt_error.set(Some(message));
            self.focus.set(Some(FocusTarget::Prompt));
            return None;
        }
        Some((params, prompt))
    }

    /// Saves the prompt, mode and settings (and the finished run of this prompt, if
    /// any) as a share link, copies it and shows it. A chat shares its conversation
    /// (after an answer: the last message with it as the run), an infill its suffix.
    pub fn share(self) {
        let mode = self.mode.get_untracked();
        let answered = self.run.with_untracked(|r| r.mode == Mode::Chat && matches!(r.phase, Phase::Done { .. }));
        let (params, prompt) = if mode == Mode::Chat && answered {
            let Some(params) = self.checked_params() else { return };
            (params, self.run.with_untracked(|r| r.prompt.clone()))
        } else {
            let Some(input) = self.checked_input() else { return };
            input
        };
        let (prompt, around) = match mode {
            Mode::Complete => (prompt, Surroundings::default()),
            Mode::Chat => (
                prompt,
                Surroundings { system: self.system.get_untracked(), history: self.history.get_untracked(), ..Surroundings::default() },
            ),
            Mode::Infill => {
                let (prefix, suffix) = fill::split_at_caret(&prompt, self.caret.get_untracked());
                (prefix, Surroundings { suffix, ..Surroundings::default() })
            }
        };
        let run = self.run.with_untracked(|r| match (&r.phase, r.timings) {
            (Phase::Done { finish_reason }, Some(timings)) if r.prompt == prompt && r.mode == mode && r.suffix == around.suffix => {
                Some(SharedRun {
                    output: r.output.clone(),
                    finish_reason: *finish_reason,
                    timings,
                    backend: self.info.with_untracked(|i| i.as_ref().map(|i| i.backend.clone())).unwrap_or_default(),
                    device: self.badge_untracked(),
                })
            }
            _ => None,
        });
        let with_run = run.is_some();
        let request = ShareRequest { prompt, mode, params, run, around };
        self.share_link.set(ShareLink::Saving);
        spawn_local(async move {
            match client::post_json::<_, ShareCreated>("/api/shares", &request).await {
                Ok(created) => {
                    let url = if created.url.starts_with("http") { created.url } else { format!("{}{}", client::origin(), created.url) };
                    let copied = client::copy_text(&url).await;
                    self.share_link.set(ShareLink::Ready { url, copied, with_run });
                }
                Err(e) => {
                    let message = match e.into_run_error() {
                        Some(RunError::Server { message, .. }) | Some(RunError::Busy { message, .. }) => message,
                        Some(RunError::Network { message }) => format!("connection lost ({message})"),
                        None => "cancelled".into(),
                    };
                    self.share_link.set(ShareLink::Failed(format!("Could not create a share link: {message}")));
                }
            }
        });
    }

    fn badge_untracked(&self) -> String {
        self.info.with_untracked(|i| i.as_ref().map(peregrine_frontend::format::backend_badge)).unwrap_or_default()
    }

    /// Restores a share when the page was opened at `/s/{id}`.
    pub fn restore_share_from_path(self) {
        let path = client::path();
        let Some(id) = path.strip_prefix("/s/").or_else(|| (path == "/s").then_some("")) else { return };
        let id = id.trim_end_matches('/').to_string();
        if id.is_empty() {
            self.shared.set(ShareView::Missing { id, message: "This share link has no id. Check that it was copied completely.".into() });
            return;
        }
        self.shared.set(ShareView::Loading(id.clone()));
        spawn_local(async move {
            let url = format!("/api/shares/{}", js_sys::encode_uri_component(&id));
            match client::get_json::<Share>(&url).await {
                Ok(share) => {
                    let s = &share.share;
                    if s.mode == Mode::Infill {
                        self.prompt.set(format!("{}{}", s.prompt, s.around.suffix));
                        self.caret.set(fill::caret_after(&s.prompt));
                    } else {
                        self.prompt.set(s.prompt.clone());
                    }
                    self.system.set(s.around.system.clone());
                    self.history.set(s.around.history.clone());
                    self.mode.set(share.share.mode);
                    self.form.set(SettingsForm::from_params(&share.share.params));
                    self.shared.set(ShareView::Loaded(Box::new(share)));
                }
                // The key form is up; the share loads once a key is given.
                Err(FetchError::Status { status: 401, .. }) => {}
                Err(FetchError::Status { status: 404, .. }) => self.shared.set(ShareView::Missing {
                    id: id.clone(),
                    message: format!(
                        "No shared run has the id \u{201c}{id}\u{201d}. The link may be mistyped or the share may have been removed."
                    ),
                }),
                Err(e) => {
                    let message = match e {
                        FetchError::Status { error, .. } => error.message,
                        FetchError::Network(m) => m,
                        FetchError::Aborted => "cancelled".into(),
                    };
                    self.shared.set(ShareView::Missing {
                        id: id.clone(),
                        message: format!("Could not load the share \u{201c}{id}\u{201d}: {message}"),
                    });
                }
            }
        });
    }
}

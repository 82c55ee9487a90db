//! The settings form: max tokens, temperature, top-p, seed, "ignore end of sequence"
//! and an optional JSON schema for the answer; each field says what is wrong with it
//! as it is typed.

use leptos::prelude::*;
use peregrine_api::playground::MAX_MAX_TOKENS;
use peregrine_frontend::settings::{Field, SettingsForm};

use crate::state::Playground;

/// The element id (and test id) of a field's input.
pub fn field_id(field: Field) -> &'static str {
    match field {
        Field::MaxTokens => "max-tokens",
        Field::Temperature => "temperature",
        Field::TopP => "top-p",
        Field::Seed => "seed",
        Field::JsonSchema => "json-schema",
    }
}

/// One text input bound to a form field, with its error message.
#[component]
fn SettingField(
    field: Field,
    label: &'static str,
    hint: String,
    inputmode: &'static str,
    get: fn(&SettingsForm) -> String,
    set: fn(&mut SettingsForm, String),
) -> impl IntoView {
    let pg = expect_context::<Playground>();
    let id = field_id(field);
    let error_id = format!("{id}-error");
    let hint_id = format!("{id}-hint");
    let error = Memo::new(move |_| pg.form.with(|f| f.error(field)));
    let described = {
        let (e, h) = (error_id.clone(), hint_id.clone());
        move || if error.with(Option::is_some) { format!("{e} {h}") } else { h.clone() }
    };
    view! {
        <div class="field" class:invalid=move || error.with(Option::is_some)>
            <label for=id>{label}</label>
            <input
                id=id
                data-testid=id
                type="text"
                inputmode=inputmode
                autocomplete="off"
                aria-invalid=move || error.with(Option::is_some).to_string()
                aria-describedby=described
                prop:value=move || pg.form.with(get)
                on:input=move |e| pg.form.update(|f| set(f, event_target_value(&e)))
            />
            <span class="hint" id=hint_id>{hint}</span>
            <span class="field-error" id=error_id data-testid=format!("{id}-error") aria-live="polite">
                {move || error.get().unwrap_or_default()}
            </span>
        </div>
    }
}

/// The optional JSON schema: the server constrains the answer to it.
#[component]
fn SchemaField() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let id = field_id(Field::JsonSchema);
    let error = Memo::new(move |_| pg.form.with(|f| f.error(Field::JsonSchema)));
    view! {
        <div class="field schema-field" class:invalid=move || error.with(Option::is_some)>
            <label for=id>"JSON schema (optional)"</label>
            <textarea
                id=id
                data-testid=id
                rows="3"
                spellcheck="false"
                placeholder="{\"type\": \"object\", \"properties\": {…}}"
                aria-invalid=move || error.with(Option::is_some).to_string()
                aria-describedby="json-schema-hint json-schema-error"
                prop:value=move || pg.form.with(|f| f.json_schema.clone())
                on:input=move |e| pg.form.update(|f| f.json_schema = event_target_value(&e))
            ></textarea>
            <span class="hint" id="json-schema-hint">"the answer is constrained to it; empty = free text"</span>
            <span class="field-error" id="json-schema-error" data-testid="json-schema-error" aria-live="polite">
                {move || error.get().unwrap_or_default()}
            </span>
        </div>
    }
}

/// Sampling settings, remembered in localStorage.
#[component]
pub fn Settings() -> impl IntoView {
    let pg = expect_context::<Playground>();
    view! {
        <fieldset class="settings" data-testid="settings">
            <legend>"Settings"</legend>
            <div class="settings-grid">
                <SettingField
                    field=Field::MaxTokens
                    label="Max tokens"
                    hint=format!("1 to {MAX_MAX_TOKENS}")
                    inputmode="numeric"
                    get=|f| f.max_tokens.clone()
                    set=|f, v| f.max_tokens = v
                />
                <SettingField
                    field=Field::Temperature
                    label="Temperature"
                    hint="0 to 2; 0 = greedy".into()
                    inputmode="decimal"
                    get=|f| f.temperature.clone()
                    set=|f, v| f.temperature = v
                />
                <SettingField
                    field=Field::TopP
                    label="Top-p"
                    hint="above 0, at most 1".into()
                    inputmode="decimal"
                    get=|f| f.top_p.clone()
                    set=|f, v| f.top_p = v
                />
                <SettingField
                    field=Field::Seed
                    label="Seed"
                    hint="empty = random".into()
                    inputmode="numeric"
                    get=|f| f.seed.clone()
                    set=|f, v| f.seed = v
                />
            </div>
            <label class="check">
                <input
                    type="checkbox"
                    id="ignore-eos"
                    data-testid="ignore-eos"
                    prop:checked=move || pg.form.with(|f| f.ignore_eos)
                    on:change=move |e| pg.form.update(|f| f.ignore_eos = event_target_checked(&e))
                />
                "Ignore end of sequence (always generate max tokens)"
            </label>
            <SchemaField/>
        </fieldset>
    }
}

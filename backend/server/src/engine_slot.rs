//! Where handlers find the engine: absent (static-only server), loading, ready or
//! failed. `serve` loads the model before it binds, so it only ever serves a ready
//! engine; the loading and failed states are for an embedder that binds first.

use std::sync::{Arc, RwLock};

use peregrine_engine::EngineHandle;

use crate::error::{Error, Result};

/// The names the OpenAI API knows the model by (`--served-model-name`, repeatable):
/// the first is the id answers report, every one is listed and accepted as `model`.
/// Default: the model file's stem, e.g. `SmolLM2-135M-Instruct.Q4_1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedNames(Vec<String>);

/// Longest name accepted: a name is echoed in every answer.
pub const MAX_SERVED_NAME_CHARS: usize = 128;

impl ServedNames {
    /// The names in order; each non-empty, printable, without spaces, at most
    /// MAX_SERVED_NAME_CHARS, none twice.
    pub fn new(names: Vec<String>) -> Result<Self> {
        let bad = |why: String| Err(Error::bad("served-model-name", why));
        if names.is_empty() {
            return bad("needs at least one name".into());
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || n.chars().count() > MAX_SERVED_NAME_CHARS || n.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(format!("{n:?}: a name is 1 to {MAX_SERVED_NAME_CHARS} characters without spaces or control characters"));
            }
            if names[..i].contains(n) {
                return bad(format!("{n:?} is given twice"));
            }
        }
        Ok(ServedNames(names))
    }

    /// The id answers report.
    pub fn id(&self) -> &str {
        &self.0[0]
    }

    /// Every name, the id first.
    pub fn all(&self) -> &[String] {
        &self.0
    }
}

impl From<String> for ServedNames {
    fn from(id: String) -> Self {
        ServedNames(vec![id])
    }
}

impl From<&str> for ServedNames {
    fn from(id: &str) -> Self {
        ServedNames(vec![id.to_string()])
    }
}

/// A loaded engine and the names the OpenAI API reports it by.
pub struct LoadedEngine {
    pub handle: EngineHandle,
    pub names: ServedNames,
}

impl LoadedEngine {
    /// The id answers report (the first served name).
    pub fn model_id(&self) -> &str {
        self.names.id()
    }

    /// The served name a client's `model` stands for: a served name is itself, the
    /// model's display name stands for the id; `None` for any other.
    pub fn served_name(&self, model: &str) -> Option<&str> {
        let named = self.names.all().iter().find(|n| *n == model).map(String::as_str);
        named.or_else(|| (model == self.handle.info().model_name).then(|| self.model_id()))
    }

    /// OpenAI's `system_fingerprint`: the server's version and a hash of what answers
    /// depend on besides the request (the model, the backend and its devices), in
    /// llama-server's `b…` form, so a client can tell when that changed.
    pub fn fingerprint(&self) -> String {
        let info = self.handle.info();
        let what = format!("{}\n{}\n{}\n{}", self.model_id(), info.backend, info.devices.join(","), info.max_batch);
        let hash = what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
        format!("b{}-{:08x}", env!("CARGO_PKG_VERSION"), hash as u32)
    }

    /// 404 `model_not_found` for a client's `model` that names another model (absent or
    /// empty: this one).
    pub fn check_model(&self, model: Option<&str>) -> crate::error::Result<()> {
        match model {
            Some(m) if !m.is_empty() && !self.serves(m) => Err(crate::error::Error::ModelNotFound(m.to_string())),
            _ => Ok(()),
        }
    }

    /// Whether a client's `model` names this model.
    pub fn serves(&self, model: &str) -> bool {
        self.served_name(model).is_some()
    }
}

/// Lifecycle of the engine as handlers see it.
enum SlotState {
    /// This server runs without an engine (front-end tests): API routes answer 503.
    Absent,
    /// The model is loading: API routes and /health answer 503.
    Loading,
    /// Serving.
    Ready(Arc<LoadedEngine>),
    /// Loading failed (the server is about to exit).
    Failed(String),
}

/// Shared, cloneable view of the engine's state.
#[derive(Clone)]
pub struct EngineSlot(Arc<RwLock<SlotState>>);

/// What `/health` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    Loading,
    Failed,
}

impl EngineSlot {
    /// No engine at all.
    pub fn absent() -> Self {
        EngineSlot(Arc::new(RwLock::new(SlotState::Absent)))
    }

    /// An engine that is still loading.
    pub fn loading() -> Self {
        EngineSlot(Arc::new(RwLock::new(SlotState::Loading)))
    }

    /// A ready engine.
    pub fn ready(handle: EngineHandle, names: impl Into<ServedNames>) -> Self {
        let slot = Self::loading();
        slot.set_ready(handle, names);
        slot
    }

    /// Marks loading done.
    pub fn set_ready(&self, handle: EngineHandle, names: impl Into<ServedNames>) {
        if let Ok(mut s) = self.0.write() {
            *s = SlotState::Ready(Arc::new(LoadedEngine { handle, names: names.into() }));
        }
    }

    /// Marks loading failed.
    pub fn set_failed(&self, message: String) {
        if let Ok(mut s) = self.0.write() {
            *s = SlotState::Failed(message);
        }
    }

    /// The engine, or a 503 saying why there is none.
    pub fn get(&self) -> Result<Arc<LoadedEngine>> {
        let s = self.0.read().map_err(|_| Error::Internal("engine state lock poisoned".into()))?;
        match &*s {
            SlotState::Ready(e) => Ok(e.clone()),
            SlotState::Loading => Err(Error::Unavailable("the model is still loading; try again in a moment".into())),
            SlotState::Absent => Err(Error::Unavailable("this server runs without a model".into())),
            SlotState::Failed(m) => Err(Error::Unavailable(format!("the model failed to load: {m}"))),
        }
    }

    /// The engine if ready, without an error value.
    pub fn ready_engine(&self) -> Option<Arc<LoadedEngine>> {
        self.get().ok()
    }

    /// For `/health`: an absent engine counts as ready (the static server is healthy).
    pub fn readiness(&self) -> Readiness {
        match self.0.read().as_deref() {
            Ok(SlotState::Ready(_)) | Ok(SlotState::Absent) => Readiness::Ready,
            Ok(SlotState::Loading) => Readiness::Loading,
            _ => Readiness::Failed,
        }
    }
}

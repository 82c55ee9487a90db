//! Where handlers find the engine: absent (static-only server), loading, ready or
//! failed. `serve` binds first and loads in the background, so `/health` can say 503
//! while the model loads.

use std::sync::{Arc, RwLock};

use peregrine_engine::EngineHandle;

use crate::error::{Error, Result};

/// A loaded engine and the model id the OpenAI API reports.
pub struct LoadedEngine {
    pub handle: EngineHandle,
    /// e.g. `SmolLM2-135M-Instruct.Q4_1` (the model file's stem).
    pub model_id: String,
}

impl LoadedEngine {
    /// Whether a client's `model` names this model (its id, or its display name).
    pub fn serves(&self, model: &str) -> bool {
        model == self.model_id || model == self.handle.info().model_name
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
    pub fn ready(handle: EngineHandle, model_id: impl Into<String>) -> Self {
        let slot = Self::loading();
        slot.set_ready(handle, model_id);
        slot
    }

    /// Marks loading done.
    pub fn set_ready(&self, handle: EngineHandle, model_id: impl Into<String>) {
        if let Ok(mut s) = self.0.write() {
            *s = SlotState::Ready(Arc::new(LoadedEngine { handle, model_id: model_id.into() }));
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

//! Loading the model and starting the engine thread from command-line arguments.

use std::path::Path;

use peregrine_engine::handle::EngineHandle;
use peregrine_engine::model::{build_generator_on, load_model, resolve_model_path, Device};

use crate::cli::ModelArgs;
use crate::error::Result;

/// A model path and device checked before anything is loaded (fast errors first).
pub struct ModelChoice {
    pub path: std::path::PathBuf,
    pub device: Device,
    /// CUDA devices (several: tensor parallelism).
    pub gpus: Vec<usize>,
}

/// Resolves `--model`/`--device` without loading anything.
pub fn choose_model(args: &ModelArgs) -> Result<ModelChoice> {
    let device: Device = args.device.parse()?;
    let gpus = args.gpus()?;
    let path = resolve_model_path(args.model.as_deref())?;
    if !path.exists() {
        return Err(peregrine_engine::Error::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        }
        .into());
    }
    Ok(ModelChoice { path, device, gpus })
}

/// The id the OpenAI API reports for a model path: its file (or folder) stem.
pub fn model_id(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    name.strip_suffix(".gguf").map(str::to_string).unwrap_or(name)
}

/// Loads the model on the engine thread and waits until it is ready.
pub async fn load_engine(choice: &ModelChoice, max_queue: usize) -> Result<EngineHandle> {
    let (path, device, gpus) = (choice.path.clone(), choice.device, choice.gpus.clone());
    eprintln!("loading {}", path.display());
    let handle =
        tokio::task::spawn_blocking(move || EngineHandle::start(move || build_generator_on(load_model(&path)?, device, &gpus), max_queue))
            .await
            .map_err(|e| crate::error::Error::Request(format!("engine start-up task failed: {e}")))??;
    let info = handle.info();
    eprintln!("model {} ({} parameters) on {} [{}]", info.model_name, info.parameters, info.backend, info.devices.join(", "));
    Ok(handle)
}

/// Resolves, loads and starts the engine (the `generate` subcommand).
pub async fn start_engine(args: &ModelArgs, max_queue: usize) -> Result<EngineHandle> {
    load_engine(&choose_model(args)?, max_queue).await
}

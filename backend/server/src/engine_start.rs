//! Loading the model and starting the engine thread from command-line arguments.

use peregrine_engine::{build_generator, load_model, EngineHandle, EngineLimits, EngineOptions};

use crate::cli::ModelArgs;
use crate::error::Result;

pub use crate::engine_args::model_id;

/// A model path and engine options checked before anything is loaded (fast errors first).
pub struct ModelChoice {
    pub path: std::path::PathBuf,
    pub options: EngineOptions,
}

/// Resolves `--model` and the engine flags without loading anything.
pub fn choose_model(args: &ModelArgs) -> Result<ModelChoice> {
    let options = args.engine_options()?;
    let path = args.model_path()?;
    if !path.exists() {
        return Err(peregrine_engine::Error::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        }
        .into());
    }
    Ok(ModelChoice { path, options })
}

/// Loads the model on the engine thread and waits until it is ready.
pub async fn load_engine(choice: &ModelChoice, limits: EngineLimits) -> Result<EngineHandle> {
    let (path, options) = (choice.path.clone(), choice.options.clone());
    eprintln!("loading {}", path.display());
    let handle = tokio::task::spawn_blocking(move || EngineHandle::start(move || build_generator(load_model(&path)?, &options), limits))
        .await
        .map_err(|e| crate::error::Error::Request(format!("engine start-up task failed: {e}")))??;
    let info = handle.info();
    eprintln!("model {} ({} parameters) on {} [{}]", info.model_name, info.parameters, info.backend, info.devices.join(", "));
    eprintln!("batch {} request(s) at once, KV budget {} positions, queue {}", info.max_batch, info.kv_budget, info.max_queue);
    Ok(handle)
}

/// Resolves, loads and starts the engine (the `generate` subcommand).
pub async fn start_engine(args: &ModelArgs, max_queue: usize) -> Result<EngineHandle> {
    load_engine(&choose_model(args)?, max_queue.into()).await
}

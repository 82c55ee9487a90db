//! Loading the model and starting the engine thread from command-line arguments.

use peregrine_engine::handle::EngineHandle;
use peregrine_engine::model::{build_generator, load_model, resolve_model_path, Device};

use crate::cli::ModelArgs;
use crate::error::Result;

/// Resolves the model path, loads it on the engine thread and waits until it is ready.
pub async fn start_engine(args: &ModelArgs, max_queue: usize) -> Result<EngineHandle> {
    let device: Device = args.device.parse()?;
    let path = resolve_model_path(args.model.as_deref())?;
    eprintln!("loading {}", path.display());
    let handle = tokio::task::spawn_blocking(move || {
        EngineHandle::start(move || build_generator(load_model(&path)?, device), max_queue)
    })
    .await
    .map_err(|e| crate::error::Error::Request(format!("engine start-up task failed: {e}")))??;
    let info = handle.info();
    eprintln!("model {} ({} parameters) on {} [{}]", info.model_name, info.parameters, info.backend, info.devices.join(", "));
    Ok(handle)
}

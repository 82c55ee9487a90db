//! `load_gguf`: a GGUF file's config and weights, tensors borrowed from the map.
//! Tensor names follow llama.cpp's `LLM_TENSOR_NAMES` for llama and qwen2.

use std::io::{IsTerminal, Write};
use std::path::Path;

use super::hparams::model_config;
use super::GgufFile;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::weights::{LayerRole, WeightRole, Weights};

/// The GGUF tensor name of `role`.
pub fn tensor_name(role: WeightRole) -> String {
    match role {
        WeightRole::Embed => "token_embd.weight".into(),
        WeightRole::FinalNorm => "output_norm.weight".into(),
        WeightRole::LmHead => "output.weight".into(),
        WeightRole::Layer(i, r) => format!("blk.{i}.{}", layer_suffix(r)),
    }
}

fn layer_suffix(role: LayerRole) -> &'static str {
    match role {
        LayerRole::AttnNorm => "attn_norm.weight",
        LayerRole::Q => "attn_q.weight",
        LayerRole::K => "attn_k.weight",
        LayerRole::V => "attn_v.weight",
        LayerRole::QBias => "attn_q.bias",
        LayerRole::KBias => "attn_k.bias",
        LayerRole::VBias => "attn_v.bias",
        LayerRole::O => "attn_output.weight",
        LayerRole::FfnNorm => "ffn_norm.weight",
        LayerRole::Gate => "ffn_gate.weight",
        LayerRole::Up => "ffn_up.weight",
        LayerRole::Down => "ffn_down.weight",
    }
}

/// Opens `path` and builds its config and weights, checking every shape.
/// Prints a progress line on stderr when stderr is a terminal.
pub fn load_gguf(path: &Path) -> Result<(GgufFile, ModelConfig, Weights)> {
    let file = GgufFile::open(path)?;
    let config = model_config(&file)?;
    let shown = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tty = std::io::stderr().is_terminal();
    let progress = |done: usize, total: usize| {
        if tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\rloading {shown}: layer {done}/{total}");
            if done == total {
                let _ = writeln!(err);
            }
        }
    };
    let weights = Weights::assemble(&config, &file.path.display().to_string(), |role| file.tensor(&tensor_name(role)), progress)?;
    Ok((file, config, weights))
}

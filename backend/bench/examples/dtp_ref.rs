//! The engine's side of the DTP checks (docs/dtp.md): writes a synthetic model as a
//! Hugging Face directory (built from a seed where it runs: weights are never carried)
//! and scores token sequences with the float32 CPU reference, unsharded, as standard
//! tensor parallelism, or as DTP, for scripts/gpu/dtp_reference.py and the GPU checks.
//!
//! Usage:
//!   dtp_ref export --shape NAME [shape flags] [--seed S] [--dtype f32|bf16] [--dtp SPEC|none] --out DIR
//!   dtp_ref score (--model DIR | --shape NAME [shape flags] [--seed S]) --tokens FILE --out FILE
//!                 [--mode unsharded|standard|dtp] [--lanes L] [--dtp SPEC]
//! Shape flags override the preset: --layers --hidden --ffn --heads --kv-heads --head-dim --vocab --context.
//! SPEC: delay=D[,early=present|none][,lanes=N]; `score --mode dtp` defaults to the model's own
//! `dtp` block. NAME: an ordinary preset (a Laneformer's checkpoints come from
//! scripts/fixtures/make_laneformer_fixtures.py). FILE (tokens): JSON list of token-id
//! lists; --out gets little-endian f32 logits [sequences × positions × vocab]; one JSON
//! summary line on stdout.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::{read_model_dtp, DtpConfig, DtpSchedule};
use peregrine_engine::lab::synthetic::{preset, synthetic_weights, PRESET_NAMES};
use peregrine_engine::weights::{LayerRole, WeightRole, Weights};
use peregrine_engine::{Error, Result};

/// Every position's logits of one token sequence.
type Scorer = Box<dyn Fn(&[u32]) -> Result<Vec<Vec<f32>>>>;

/// Seed of the synthetic weights unless --seed says otherwise (the bench's).
const DEFAULT_SEED: u64 = 1234;

fn usage() -> Error {
    Error::InvalidRequest(
        "usage: dtp_ref export --shape NAME [--layers N ...] [--seed S] [--dtype f32|bf16] [--dtp SPEC|none] --out DIR | \
         dtp_ref score (--model DIR | --shape NAME ...) --tokens FILE --out FILE [--mode unsharded|standard|dtp] [--lanes L] [--dtp SPEC]"
            .into(),
    )
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

/// `--flag value` pairs.
fn flags(args: &[String]) -> Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let key = flag.strip_prefix("--").ok_or_else(usage)?;
        out.insert(key.to_string(), it.next().cloned().ok_or_else(usage)?);
    }
    Ok(out)
}

fn number(f: &HashMap<String, String>, key: &str) -> Result<Option<usize>> {
    f.get(key).map(|v| v.parse().map_err(|_| Error::InvalidRequest(format!("--{key} `{v}` is not a whole number")))).transpose()
}

/// The preset named by --shape with the shape flags applied.
fn shape(f: &HashMap<String, String>) -> Result<ModelConfig> {
    let name = f.get("shape").ok_or_else(usage)?;
    let mut c = match preset(name) {
        Some(c) if !c.lanes.is_laneformer() => c,
        found => {
            let what = if found.is_some() { "a Laneformer preset" } else { "unknown" };
            return Err(Error::InvalidRequest(format!("shape `{name}`: {what} (one of {})", PRESET_NAMES.join(", "))));
        }
    };
    let fields: [(&str, &mut usize); 8] = [
        ("layers", &mut c.num_layers),
        ("hidden", &mut c.hidden_size),
        ("ffn", &mut c.intermediate_size),
        ("heads", &mut c.num_heads),
        ("kv-heads", &mut c.num_kv_heads),
        ("head-dim", &mut c.head_dim),
        ("vocab", &mut c.vocab_size),
        ("context", &mut c.max_context),
    ];
    let mut changed = false;
    for (key, field) in fields {
        if let Some(v) = number(f, key)? {
            *field = v;
            changed = true;
        }
    }
    if changed {
        c.name = format!("{}-custom", c.name);
    }
    c.validate().map_err(|e| Error::InvalidRequest(format!("shape: {e}")))?;
    Ok(c)
}

fn seed(f: &HashMap<String, String>) -> Result<u64> {
    Ok(number(f, "seed")?.map_or(DEFAULT_SEED, |s| s as u64))
}

/// Every tensor of `weights` under its transformers name.
fn named_tensors<'w>(config: &ModelConfig, weights: &'w Weights) -> Vec<(String, &'w peregrine_engine::tensor::Tensor)> {
    use peregrine_engine::hf::tensor_name;
    let mut out = vec![(tensor_name(WeightRole::Embed), &weights.embed), (tensor_name(WeightRole::FinalNorm), &weights.final_norm)];
    if let Some(head) = &weights.lm_head {
        out.push((tensor_name(WeightRole::LmHead), head));
    }
    for (i, l) in weights.layers.iter().enumerate() {
        let name = |r: LayerRole| tensor_name(WeightRole::Layer(i, r));
        out.extend([
            (name(LayerRole::AttnNorm), &l.attn_norm),
            (name(LayerRole::Q), &l.q),
            (name(LayerRole::K), &l.k),
            (name(LayerRole::V), &l.v),
            (name(LayerRole::O), &l.o),
            (name(LayerRole::FfnNorm), &l.ffn_norm),
            (name(LayerRole::Gate), &l.gate),
            (name(LayerRole::Up), &l.up),
            (name(LayerRole::Down), &l.down),
        ]);
        for (r, b) in [(LayerRole::QBias, &l.q_bias), (LayerRole::KBias, &l.k_bias), (LayerRole::VBias, &l.v_bias)] {
            if let Some(b) = b {
                out.push((name(r), b));
            }
        }
    }
    debug_assert!(config.attention_bias || weights.layers.iter().all(|l| l.q_bias.is_none()));
    out
}

fn export(args: &[String]) -> Result<()> {
    let f = flags(args)?;
    let config = shape(&f)?;
    let out = PathBuf::from(f.get("out").ok_or_else(usage)?);
    let bf16 = match f.get("dtype").map(String::as_str) {
        None | Some("f32") => false,
        Some("bf16") => true,
        Some(other) => return Err(Error::InvalidRequest(format!("--dtype `{other}` (f32 or bf16)"))),
    };
    let dtp = match f.get("dtp").map(String::as_str) {
        None | Some("none") => None,
        Some(spec) => Some(spec.parse::<DtpConfig>()?),
    };
    let t0 = Instant::now();
    let weights = synthetic_weights(&config, seed(&f)?);
    std::fs::create_dir_all(&out).map_err(io(&out))?;
    let mut json = peregrine_engine::lab::hf_export::hf_config_json(&config);
    if let (Some(d), Some(fields)) = (dtp, json.as_object_mut()) {
        let block = serde_json::to_value(d.to_block()).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        fields.insert(peregrine_engine::dtp::config::HF_BLOCK_KEY.into(), block);
    }
    let config_path = out.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&json).unwrap_or_default() + "\n").map_err(io(&config_path))?;
    let mut blobs = Vec::new();
    for (name, t) in named_tensors(&config, &weights) {
        let values = t.to_f32()?;
        let bytes: Vec<u8> = if bf16 {
            values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect()
        } else {
            values.iter().flat_map(|v| v.to_le_bytes()).collect()
        };
        blobs.push((name, t.shape.clone(), bytes));
    }
    let dtype = if bf16 { safetensors::Dtype::BF16 } else { safetensors::Dtype::F32 };
    let views = blobs
        .iter()
        .map(|(n, shape, bytes)| {
            safetensors::tensor::TensorView::new(dtype, shape.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::InvalidRequest(format!("{n}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let st = out.join(peregrine_engine::hf::SINGLE_FILE);
    safetensors::tensor::serialize_to_file(views, None, &st).map_err(|e| Error::InvalidRequest(format!("{}: {e}", st.display())))?;
    let summary = serde_json::json!({
        "model": config.name,
        "parameters": config.parameter_count(),
        "dtype": if bf16 { "bf16" } else { "f32" },
        "dtp": dtp.map(|d| d.to_block()),
        "out": out.display().to_string(),
        "seconds": t0.elapsed().as_secs_f64(),
    });
    println!("{summary}");
    Ok(())
}

fn score(args: &[String]) -> Result<()> {
    let f = flags(args)?;
    let tokens = PathBuf::from(f.get("tokens").ok_or_else(usage)?);
    let out = PathBuf::from(f.get("out").ok_or_else(usage)?);
    let text = std::fs::read_to_string(&tokens).map_err(io(&tokens))?;
    let sequences: Vec<Vec<u32>> = serde_json::from_str(&text).map_err(|e| Error::InvalidRequest(format!("{}: {e}", tokens.display())))?;
    let t0 = Instant::now();
    let (config, weights, model_dtp) = match f.get("model") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let (config, weights) = peregrine_engine::hf::load_hf_dir(&dir)?;
            (config, weights, read_model_dtp(&dir)?)
        }
        None => {
            let config = shape(&f)?;
            let weights = synthetic_weights(&config, seed(&f)?);
            (config, weights, None)
        }
    };
    let mode = f.get("mode").map_or("dtp", String::as_str);
    let lanes = number(&f, "lanes")?.unwrap_or(1);
    let dtp = match f.get("dtp") {
        Some(spec) => Some(spec.parse::<DtpConfig>()?),
        None => model_dtp,
    };
    // One scorer per mode; each returns every position's logits of one sequence.
    let mut described = serde_json::json!({ "mode": mode, "lanes": lanes });
    let scorer: Scorer = match mode {
        "unsharded" => {
            let m = ReferenceModel::new(&config, &weights)?;
            let cap = config.max_context;
            Box::new(move |seq| m.forward(&mut KvCache::new(&m.config, cap), seq, true))
        }
        "standard" | "dtp" => {
            let execution = if mode == "standard" {
                Execution::Standard
            } else {
                let d = dtp.ok_or_else(|| Error::InvalidRequest("--mode dtp: the model has no dtp block; pass --dtp SPEC".into()))?;
                described["dtp"] = serde_json::to_value(d.to_block()).unwrap_or_default();
                Execution::Delayed(DtpSchedule::new(&d, &config, lanes)?)
            };
            let m = ShardedModel::new(&config, &weights, lanes)?;
            Box::new(move |seq| m.session(execution.clone())?.forward(seq))
        }
        other => return Err(Error::InvalidRequest(format!("--mode `{other}` (unsharded, standard or dtp)"))),
    };
    drop(weights);
    let load_s = t0.elapsed().as_secs_f64();
    let file = std::fs::File::create(&out).map_err(io(&out))?;
    let mut w = BufWriter::new(file);
    let t1 = Instant::now();
    let mut positions = 0;
    for seq in &sequences {
        for row in scorer(seq)? {
            let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
            w.write_all(&bytes).map_err(io(&out))?;
        }
        positions += seq.len();
    }
    w.flush().map_err(io(&out))?;
    described["model"] = config.name.clone().into();
    described["vocab_size"] = config.vocab_size.into();
    described["sequences"] = sequences.len().into();
    described["positions"] = positions.into();
    described["load_s"] = load_s.into();
    described["score_s"] = t1.elapsed().as_secs_f64().into();
    println!("{described}");
    Ok(())
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("export") => export(&args[1..]),
        Some("score") => score(&args[1..]),
        _ => Err(usage()),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

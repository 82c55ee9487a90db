//! Teacher-forced logits of a Hugging Face directory through the engine's real HF
//! loader, for scripts/gpu/transformers_check.py (which compares them with
//! transformers on the GPU host, where there is no Rust: build here, carry it).
//!
//! Usage:
//!   hf_score config NAME                      transformers config.json of a preset, on stdout
//!   hf_score score --model DIR --tokens FILE --out FILE [--device cuda|cpu] [--tp N]
//!       FILE: JSON list of token-id lists; writes little-endian f32 logits
//!       [sequences × positions × vocab] to --out and one JSON summary line to stdout.
//!   hf_score tokenizer --gguf FILE --out DIR  the GGUF's tokenizer as tokenizer.json +
//!       tokenizer_config.json (BOS/EOS, chat template) in DIR, so a random-weight HF
//!       directory of a preset with the same vocabulary can be served (scripts/gpu/cover_x2.sh).

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::cuda::CudaRuntime;
use peregrine_engine::gguf::GgufFile;
use peregrine_engine::runtime::Runtime;
use peregrine_engine::tokenizer::Tokenizer;
use peregrine_engine::{Error, Result};

fn usage() -> Error {
    Error::InvalidRequest(
        "usage: hf_score config NAME | hf_score score --model DIR --tokens FILE --out FILE [--device cuda|cpu] [--tp N] | hf_score tokenizer --gguf FILE --out DIR"
            .into(),
    )
}

fn io(path: &std::path::Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

fn score(args: &[String]) -> Result<()> {
    let (mut model, mut tokens, mut out, mut device, mut tp) = (None, None, None, "cuda".to_string(), 1usize);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().cloned().ok_or_else(usage)?;
        match flag.as_str() {
            "--model" => model = Some(PathBuf::from(value)),
            "--tokens" => tokens = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--device" => device = value,
            "--tp" => tp = value.parse().map_err(|_| usage())?,
            _ => return Err(usage()),
        }
    }
    let (model, tokens, out) = (model.ok_or_else(usage)?, tokens.ok_or_else(usage)?, out.ok_or_else(usage)?);
    let text = std::fs::read_to_string(&tokens).map_err(io(&tokens))?;
    let sequences: Vec<Vec<u32>> = serde_json::from_str(&text).map_err(|e| Error::InvalidRequest(format!("{}: {e}", tokens.display())))?;
    let t0 = Instant::now();
    let (config, weights) = peregrine_engine::hf::load_hf_dir(&model)?;
    let mut rt: Box<dyn Runtime> = match device.as_str() {
        "cuda" => {
            // A `dtp` block in config.json runs the model as DTP over the --tp lanes.
            let dtp = match peregrine_engine::dtp::read_model_dtp(&model)? {
                Some(d) => Some(peregrine_engine::dtp::DtpSchedule::new(&d, &config, tp)?),
                None => None,
            };
            {
                // Library folders and the kernel cache from the variables `peregrine` reads.
                let var = |v: &str| std::env::var_os(v).filter(|p| !p.is_empty()).map(std::path::PathBuf::from);
                let paths = peregrine_engine::CudaPaths::from_vars(&var);
                let cuda = peregrine_engine::CudaOptions { paths, ..Default::default() };
                Box::new(CudaRuntime::new(&config, &weights, &(0..tp).collect::<Vec<_>>(), &cuda, dtp)?)
            }
        }
        "cpu" => Box::new(ReferenceRuntime::new(&config, &weights)?),
        other => return Err(Error::InvalidRequest(format!("unknown device `{other}` (cuda or cpu)"))),
    };
    drop(weights);
    let load_s = t0.elapsed().as_secs_f64();
    let file = std::fs::File::create(&out).map_err(io(&out))?;
    let mut w = BufWriter::new(file);
    let t1 = Instant::now();
    let mut positions = 0;
    for seq in &sequences {
        let logits = rt.score(seq)?;
        if logits.len() != seq.len() {
            return Err(Error::Unavailable(format!("scored {} positions of a {}-token sequence", logits.len(), seq.len())));
        }
        for row in &logits {
            let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
            w.write_all(&bytes).map_err(io(&out))?;
        }
        positions += seq.len();
    }
    w.flush().map_err(io(&out))?;
    let backend = rt.backend();
    let summary = serde_json::json!({
        "model": config.name,
        "vocab_size": config.vocab_size,
        "attention_bias": config.attention_bias,
        "tie_embeddings": config.tie_embeddings,
        "sequences": sequences.len(),
        "positions": positions,
        "backend": format!("{} [{}]", backend.kind, backend.devices.join(", ")),
        "load_s": load_s,
        "score_s": t1.elapsed().as_secs_f64(),
    });
    println!("{summary}");
    Ok(())
}

/// Writes the GGUF's tokenizer as the files the HF loader reads beside a model.
fn export_tokenizer(args: &[String]) -> Result<()> {
    let (mut gguf, mut out) = (None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().map(PathBuf::from).ok_or_else(usage)?;
        match flag.as_str() {
            "--gguf" => gguf = Some(value),
            "--out" => out = Some(value),
            _ => return Err(usage()),
        }
    }
    let (gguf, out) = (gguf.ok_or_else(usage)?, out.ok_or_else(usage)?);
    let tok = Tokenizer::from_gguf(&GgufFile::open(&gguf)?)?;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i));
    let config = serde_json::json!({
        "bos_token": text(tok.bos_id()),
        "eos_token": text(tok.eos_id()),
        "add_bos_token": tok.adds_bos(),
        "chat_template": tok.chat_template(),
    });
    std::fs::create_dir_all(&out).map_err(io(&out))?;
    for (name, body) in [("tokenizer.json", tok.to_json()?), ("tokenizer_config.json", config.to_string())] {
        let path = out.join(name);
        std::fs::write(&path, body).map_err(io(&path))?;
    }
    println!("{}: {} tokens, BOS {:?}, EOS {:?}", out.display(), tok.vocab_size(), tok.bos_id(), tok.eos_ids());
    Ok(())
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("config") => {
            let name = args.get(1).ok_or_else(usage)?;
            let config =
                peregrine_engine::lab::synthetic::preset(name).ok_or_else(|| Error::InvalidRequest(format!("unknown preset `{name}`")))?;
            println!("{}", peregrine_engine::lab::hf_export::hf_config_json(&config));
            Ok(())
        }
        Some("score") => score(&args[1..]),
        Some("tokenizer") => export_tokenizer(&args[1..]),
        _ => Err(usage()),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

//! Opening a model by path (GGUF file or Hugging Face directory), choosing the
//! device, and building the generator the engine thread runs.

use std::path::{Path, PathBuf};

use crate::config::ModelConfig;
use crate::cpu::build_cpu_runtime;
use crate::error::{CudaError, Error, Result};
use crate::generator::Generator;
use crate::options::{Device, EngineOptions};
use crate::template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;

/// File name of the default model inside the model cache.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Everything read from a model's files: opaque to the facade, which hands it from
/// [`load_model`] to [`build_generator`].
pub struct ModelFiles {
    pub(crate) path: PathBuf,
    pub(crate) config: ModelConfig,
    pub(crate) weights: Weights,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: Option<ChatTemplate>,
}

/// What the tests and the apparatus read of loaded files.
#[cfg(feature = "lab")]
impl ModelFiles {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// The model path to use: `explicit` (the CLI's `--model` / `$PEREGRINE_MODEL`), else
/// the default model in `models_dir` (the CLI's cache folder), which must exist.
pub fn resolve_model_path(explicit: Option<&Path>, models_dir: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let dir = models_dir.ok_or_else(|| Error::InvalidRequest("no model given and no cache folder known; pass --model".into()))?;
    let path = dir.join(DEFAULT_MODEL_FILE);
    if !path.exists() {
        return Err(Error::InvalidRequest(format!(
            "no model given and the default model is missing at {}; run scripts/fetch-model.sh or pass --model",
            path.display()
        )));
    }
    Ok(path)
}

/// Reads a GGUF file or a Hugging Face directory.
pub fn load_model(path: &Path) -> Result<ModelFiles> {
    if !path.exists() {
        return Err(Error::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }
    let (config, weights, tokenizer) = if path.is_dir() {
        let (config, weights) = crate::hf::load_hf_dir(path)?;
        let tokenizer = Tokenizer::from_file(&path.join("tokenizer.json"))?;
        (config, weights, tokenizer)
    } else {
        let (file, config, weights) = crate::gguf::load_gguf(path)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        (config, weights, tokenizer)
    };
    let config = with_declared_lanes(config, path)?;
    let template = match tokenizer.chat_template() {
        Some(src) => {
            let text = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).unwrap_or_default();
            Some(ChatTemplate::new(src, &text(tokenizer.bos_id()), &text(tokenizer.eos_id()))?)
        }
        None => None,
    };
    Ok(ModelFiles { path: path.to_path_buf(), config, weights, tokenizer, template })
}

/// `config` with the lanes a `dtp` block (or `peregrine.dtp.*` keys) fixes: such a model
/// was trained for that many lanes, so every runtime runs them (a block whose lanes are
/// the run's `--tp` leaves one lane here, the ordinary model, and binds at GPU load).
fn with_declared_lanes(mut config: ModelConfig, path: &Path) -> Result<ModelConfig> {
    use crate::dtp::{EarlyLayers, Lanes};
    if let Some(dtp) = crate::dtp::read_model_dtp(path)? {
        if let Lanes::Fixed(count) = dtp.lanes {
            let early_comm = dtp.early_layers == EarlyLayers::Present;
            config.lanes = crate::config::LaneConfig { count, delay: dtp.delay, early_comm, ..Default::default() };
            config.validate().map_err(|reason| Error::BadConfig { path: path.display().to_string(), reason: format!("dtp: {reason}") })?;
        }
    }
    Ok(config)
}

/// The CUDA devices of a run with tensor-parallel degree `tp`: `gpus` as a
/// comma-separated list of ordinals (exactly `tp` of them), by default the first `tp`.
/// A device may repeat only when the ranks may share a GPU (`share_gpu`, the
/// single-GPU tests of TP); otherwise a repeat is a typing mistake.
pub fn parse_gpus(tp: usize, gpus: Option<&str>, share_gpu: bool) -> Result<Vec<usize>> {
    if tp == 0 {
        return Err(Error::InvalidRequest("--tp must be at least 1".into()));
    }
    let Some(list) = gpus else { return Ok((0..tp).collect()) };
    let ids = list
        .split(',')
        .map(|t| t.trim().parse::<usize>().map_err(|_| Error::InvalidRequest(format!("--gpus: `{t}` is not a device number"))))
        .collect::<Result<Vec<_>>>()?;
    if ids.len() != tp {
        return Err(Error::InvalidRequest(format!("--gpus names {} devices but --tp is {tp}", ids.len())));
    }
    if let Some((i, d)) = ids.iter().enumerate().find(|(i, d)| !share_gpu && ids[..*i].contains(d)) {
        return Err(Error::InvalidRequest(format!(
            "--gpus lists device {d} twice (position {i}); ranks share a GPU only with --tp-share-gpu"
        )));
    }
    Ok(ids)
}

/// Builds the generator `options` ask for from loaded files.
pub fn build_generator(files: ModelFiles, options: &EngineOptions) -> Result<Generator> {
    let gpus = &options.gpus;
    if gpus.len() > 1 && options.device == Device::Cpu {
        return Err(Error::InvalidRequest("--tp above 1 needs --device cuda (or auto with GPUs)".into()));
    }
    let runtime: Box<dyn crate::runtime::Runtime> = match options.device {
        Device::Cuda => Box::new(cuda_runtime(&files, options)?),
        Device::Cpu => build_cpu_runtime(&options.cpu, &files.config, &files.weights)?,
        // No device ⇒ CPU, said in the log. A device that is present but fails is an
        // error, never a silent fall-back that would hide a broken GPU path.
        Device::Auto => match crate::cuda::devices() {
            Ok(_) => Box::new(cuda_runtime(&files, options)?),
            Err(Error::Cuda(why)) if gpus.len() > 1 => {
                return Err(CudaError::context(format!("--tp {} needs CUDA devices", gpus.len()), why).into())
            }
            Err(why) if gpus.len() > 1 => return Err(why),
            Err(why) => {
                eprintln!("no CUDA device ({why}), using CPU");
                build_cpu_runtime(&options.cpu, &files.config, &files.weights)?
            }
        },
    };
    Ok(Generator { runtime, tokenizer: Some(files.tokenizer), template: files.template })
}

/// The ranks of a run on `gpus`: one per GPU, except a Laneformer's lanes, folded onto
/// the GPUs (each GPU hosts `lanes / gpus` consecutive lanes, one persistent kernel each).
pub fn rank_devices(config: &ModelConfig, gpus: &[usize]) -> Result<Vec<usize>> {
    let lanes = config.lanes.count;
    if lanes == 1 {
        return Ok(gpus.to_vec());
    }
    if !lanes.is_multiple_of(gpus.len()) {
        return Err(Error::InvalidRequest(format!("{} has {lanes} lanes; --tp {} must divide them", config.name, gpus.len())));
    }
    Ok(gpus.iter().flat_map(|&g| std::iter::repeat_n(g, lanes / gpus.len())).collect())
}

/// The persistent-kernel runtime on `options.gpus` (tensor parallel when several; DTP
/// when the model declares it), announced in the log.
fn cuda_runtime(files: &ModelFiles, options: &EngineOptions) -> Result<crate::cuda::CudaRuntime> {
    let config = &files.config;
    let dtp = if config.lanes.count > 1 {
        Some(crate::dtp::DtpSchedule::of_laneformer(config)?)
    } else {
        match crate::dtp::read_model_dtp(&files.path)? {
            Some(d) => Some(crate::dtp::DtpSchedule::new(&d, config, options.gpus.len())?),
            None => None,
        }
    };
    let ranks = rank_devices(config, &options.gpus)?;
    let mut cuda = options.cuda.clone();
    cuda.share_gpu |= ranks.len() > options.gpus.len();
    let (runtime, threads) = crate::cuda::tune::build_tuned(config, &files.weights, &ranks, &cuda, dtp, &mut |line| eprintln!("{line}"))?;
    let mut runtime = runtime;
    eprintln!("using CUDA: {}; {}", runtime.describe(), threads.describe());
    // Without the batched prefill (DTP) prompts run token by token (no cuBLAS): one short run is enough.
    let lengths = if runtime.batched_prefill() { warm_up_lengths(files.config.max_context) } else { vec![2] };
    let took = warm_up(&mut runtime, &lengths)?;
    eprintln!("CUDA warm-up run: {:.1} ms", took.as_secs_f64() * 1e3);
    Ok(runtime)
}

/// Throw-away runs at load, one per prompt length in `lengths` (1 token each):
/// a process's first run of a prompt length class pays one-time costs (cuBLAS's handle,
/// heuristics and lazily loaded GEMM kernels of the batched prefill, the kernels' module
/// loads), measured on the default model as 44–63 ms of time to first token on the first
/// request (12–14 ms for a 4–7 token prompt after a single 32-token warm-up) against
/// ~2 ms once warm. The user's first requests should not pay them.
fn warm_up(runtime: &mut dyn crate::runtime::Runtime, lengths: &[usize]) -> Result<std::time::Duration> {
    use crate::runtime::{Cancel, DecodeJob, Flow};
    let vocab = runtime.config().vocab_size as u32;
    let sampling = crate::sampling::SamplingParams::default();
    let start = std::time::Instant::now();
    for &len in lengths {
        let prompt: Vec<u32> = (0..len as u32).map(|i| (i * 7 + 1) % vocab).collect();
        let job = DecodeJob {
            prompt: &prompt,
            max_tokens: 1,
            sampling: &sampling,
            stop_tokens: &[],
            top_logprobs: 0,
            cancel: Cancel::NEVER,
            reuse_prefix: false,
            draft: crate::speculative::DraftPlan::OFF,
            constraint: None,
        };
        runtime.generate(&job, &mut |_| Flow::Continue)?;
    }
    Ok(start.elapsed())
}

/// Prompt lengths of the warm-up with the batched prefill (its GEMM shapes): powers of
/// two from 2 to 512 that leave room for one generated token in `context`.
fn warm_up_lengths(context: usize) -> Vec<usize> {
    (1..=9).map(|p| 1usize << p).filter(|&len| len < context).collect()
}

#[cfg(test)]
mod warm_up_tests {
    #[test]
    fn warm_up_lengths_double_up_to_512_within_the_context() {
        assert_eq!(super::warm_up_lengths(8192), vec![2, 4, 8, 16, 32, 64, 128, 256, 512]);
        assert_eq!(super::warm_up_lengths(64), vec![2, 4, 8, 16, 32]);
        assert!(super::warm_up_lengths(2).is_empty());
    }
}

#[cfg(test)]
mod gpu_list_tests {
    use super::{parse_gpus, rank_devices};

    #[test]
    fn a_laneformer_folds_its_lanes_onto_the_gpus() {
        let mut c = crate::lab::synthetic::preset("laneformer-2b").expect("preset");
        assert_eq!(rank_devices(&c, &[0]).expect("one GPU"), vec![0; 8]);
        assert_eq!(rank_devices(&c, &[3, 1]).expect("two GPUs"), vec![3, 3, 3, 3, 1, 1, 1, 1]);
        assert_eq!(rank_devices(&c, &(0..8).collect::<Vec<_>>()).expect("eight GPUs"), (0..8).collect::<Vec<_>>());
        let err = rank_devices(&c, &[0, 1, 2]).expect_err("3 does not divide 8").to_string();
        assert!(err.contains("8 lanes; --tp 3 must divide them"), "{err}");
        c.lanes = Default::default();
        assert_eq!(rank_devices(&c, &[2, 5]).expect("ordinary"), vec![2, 5]);
    }

    #[test]
    fn gpus_default_to_the_first_tp_and_reject_bad_lists() {
        assert_eq!(parse_gpus(1, None, false).expect("default"), vec![0]);
        assert_eq!(parse_gpus(2, None, false).expect("default"), vec![0, 1]);
        assert_eq!(parse_gpus(2, Some("3, 1"), false).expect("list"), vec![3, 1]);
        assert_eq!(parse_gpus(4, Some("0,0,0,0"), true).expect("ranks sharing a GPU"), vec![0; 4]);
        for (tp, list, needle) in
            [(0, None, "at least 1"), (2, Some("0"), "names 1 devices"), (2, Some("1,1"), "twice"), (2, Some("0,x"), "`x`")]
        {
            let err = parse_gpus(tp, list, false).expect_err("bad list").to_string();
            assert!(err.contains(needle), "{err}");
        }
    }
}

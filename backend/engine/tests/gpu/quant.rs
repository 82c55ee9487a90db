//! The GPU checks of native quantized weights: each format's matrix-vector product
//! against float64, and synthetic quantized models teacher-forced against the fast CPU
//! runtime on the same weights (top-1 agreement), plus the race check under chaos.

use libtest_mimic::{Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cuda::qcheck::quant_matvec;
use peregrine_engine::cuda::quant::{repack, GpuFormat};
use peregrine_engine::cuda::{CudaRuntime, KernelOptions};
use peregrine_engine::lab::logits::argmax;
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::synthetic::{check_shapes, random_quant_tensor, synthetic_quant_weights, QuantMix};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::tensor::DType;
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, Diagnostics, GpuWeights};

use super::{cuda_options, ensure, ids, run, Check};

/// Normwise error allowed against float64: |y − y64| / Σ|w·x| per row (f32 accumulation).
const MAX_MATVEC_ERR: f64 = 1e-5;
/// Teacher-forced positions per model, and the top-1 agreement required: on a real model,
/// and on random-weight ones, whose logits are flat enough that near-ties are common
/// (every disagreement must then be a near-tie the measured logit difference explains).
const POSITIONS: usize = 512;
const MIN_TOP1: f64 = 0.99;
const MIN_TOP1_RANDOM: f64 = 0.98;

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K] {
        t.push(Trial::test(format!("quantized matvec {dtype:?}: matches float64 on random blocks"), move || matvec_check(dtype)));
    }
    // The default model file (Q4_1 matrices, Q8_0 embedding) where it was fetched or carried.
    let file = default_model();
    let why = match &file {
        Some(p) if p.exists() => None,
        Some(p) => Some(format!("{} is absent", p.display())),
        None => Some("PEREGRINE_DEFAULT_MODEL is not set".to_string()),
    };
    let trial = Trial::test("default model file: teacher-forced top-1 matches the CPU fast runtime", move || {
        let path = file.ok_or("no model path")?;
        let (_, config, weights) = peregrine_engine::gguf::load_gguf(&path).map_err(|e| e.to_string())?;
        top1_agreement(&config, &weights, MIN_TOP1)
    });
    if let Some(why) = why {
        println!("default model check does not run: {why}");
        t.push(trial.with_ignored_flag(true));
    } else {
        t.push(trial);
    }
    t.push(Trial::test("tp 2 quantized (Q4_K_M mix): scored logits match one GPU, chaos on each rank changes no token", tp_quant_check));
    t.push(Trial::test("--gpu-weights q8_0 on float weights: the logits of the same matrices quantized on the host", q8_at_load_check));
    for (config, mix) in quant_models() {
        let name = format!("{} {mix:?}", config.name);
        let (c, m) = (config.clone(), mix);
        t.push(Trial::test(format!("{name}: teacher-forced top-1 matches the CPU fast runtime"), move || top1_check(&c, m)));
        t.push(Trial::test(format!("{name}: chaos delays change no token"), move || quant_race_check(&config, mix)));
    }
    t
}

/// A one-GPU runtime that streams the quantized matrices as they are (`--gpu-weights native`).
fn runtime(config: &ModelConfig, weights: &Weights) -> Result<CudaRuntime, Failed> {
    runtime_on(config, weights, &[0], GpuWeights::Native)
}

fn runtime_on(config: &ModelConfig, weights: &Weights, gpus: &[usize], choice: GpuWeights) -> Result<CudaRuntime, Failed> {
    let cuda = CudaOptions { weights: choice, ..cuda_options() };
    Ok(CudaRuntime::with_kernel(config, weights, gpus, &cuda, KernelOptions::default(), None).map_err(|e| e.to_string())?)
}

/// The check shapes with each mix, and one shape whose every dimension takes K-quants.
fn quant_models() -> Vec<(ModelConfig, QuantMix)> {
    let shapes = check_shapes();
    let k_quant = ModelConfig {
        name: "tiny-k-quant".into(),
        hidden_size: 512,
        intermediate_size: 1536,
        num_layers: 8,
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 64,
        vocab_size: 4096,
        ..shapes[0].clone()
    };
    vec![
        (k_quant, QuantMix::Q4KM),
        (shapes[0].clone(), QuantMix::Uniform(DType::Q8_0)),
        (shapes[1].clone(), QuantMix::Uniform(DType::Q4_0)),
        (shapes[2].clone(), QuantMix::Uniform(DType::Q4_1)),
    ]
}

fn matvec_check(dtype: DType) -> Check {
    let fmt = GpuFormat::native(dtype).ok_or("no GPU format")?;
    let ks: &[usize] = if fmt.block() == 256 { &[512, 2048, 2816] } else { &[576, 2048, 1376] };
    let mut rng = SplitMix64(77 + fmt.tag() as u64);
    let mut worst = 0.0f64;
    for &k in ks {
        let rows = 301;
        let t = random_quant_tensor("w", dtype, rows, k, 5 + k as u64).map_err(|e| e.to_string())?;
        let (got_fmt, packed) = repack(&t, 0..rows, 0..k).map_err(|e| e.to_string())?;
        ensure(got_fmt == fmt, || format!("repacked as {got_fmt:?}"))?;
        let x: Vec<f32> = (0..k).map(|_| rng.next_signed()).collect();
        let y = quant_matvec(0, &cuda_options().paths, fmt, k, rows, &packed, &x).map_err(|e| e.to_string())?;
        let w = t.to_f32().map_err(|e| e.to_string())?;
        for r in 0..rows {
            let row = &w[r * k..(r + 1) * k];
            let exact: f64 = row.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
            let scale: f64 = row.iter().zip(&x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum::<f64>().max(1e-30);
            worst = worst.max((y[r] as f64 - exact).abs() / scale);
        }
    }
    println!("  {dtype:?}: worst normwise error {worst:.2e} (K = {ks:?})");
    ensure(worst <= MAX_MATVEC_ERR, || format!("{dtype:?}: error {worst:.2e} > {MAX_MATVEC_ERR:.0e}"))
}

/// Teacher-forced scoring of POSITIONS random tokens on the GPU and on the fast CPU
/// runtime (the quantized formats' reference) with the same weights: the top-1 tokens
/// agree at ≥ 99 % of positions, every disagreement a near-tie (reported).
fn top1_check(config: &ModelConfig, mix: QuantMix) -> Check {
    top1_agreement(config, &synthetic_quant_weights(config, 99, mix), MIN_TOP1_RANDOM)
}

/// PEREGRINE_DEFAULT_MODEL (scripts/env.sh sets it; the GPU host gets it carried).
fn default_model() -> Option<std::path::PathBuf> {
    std::env::var_os("PEREGRINE_DEFAULT_MODEL").filter(|p| !p.is_empty()).map(std::path::PathBuf::from)
}

fn top1_agreement(config: &ModelConfig, weights: &Weights, min_top1: f64) -> Check {
    top1_agreement_of(runtime(config, weights)?, config, weights, POSITIONS, min_top1)
}

/// Teacher-forced top-1 of `gpu` against the fast CPU runtime on the same weights over
/// `positions` random tokens; every disagreement must be a near-tie.
pub fn top1_agreement_of(mut gpu: CudaRuntime, config: &ModelConfig, weights: &Weights, positions: usize, min_top1: f64) -> Check {
    println!("  {}", gpu.describe());
    let mut cpu = FastRuntime::new(config, weights, FastOptions::defaults()).map_err(|e| e.to_string())?;
    let tokens = SplitMix64(0xBEEF).tokens(positions, config.vocab_size);
    let g = gpu.score(&tokens).map_err(|e| e.to_string())?;
    let c = cpu.score(&tokens).map_err(|e| e.to_string())?;
    ensure(g.len() == positions && c.len() == positions, || format!("{} and {} scored positions", g.len(), c.len()))?;
    // The GPU's pick at each position is its own top-1 there.
    let picks: Vec<u32> = g.iter().map(|row| argmax(row)).collect();
    let a = peregrine_engine::lab::teacher_forced::agreement(&picks, &g, &c);
    let rate = a.agree as f64 / positions as f64;
    println!(
        "  top-1 agreement {}/{positions} ({:.1} %), {} disagreements near-ties, logits max rel diff {:.2e}",
        a.agree,
        100.0 * rate,
        a.near_ties,
        a.worst_rel
    );
    ensure(rate >= min_top1 && a.unexplained.is_empty(), || {
        format!("top-1 agreement {}/{positions} (need {min_top1}); not near-ties: {}", a.agree, a.unexplained.join("; "))
    })
}

/// Greedy and sampled tokens of a quantized model are the same with chaos delays.
fn quant_race_check(config: &ModelConfig, mix: QuantMix) -> Result<(), Failed> {
    race_check_of(runtime(config, &synthetic_quant_weights(config, 99, mix))?, config)
}

/// Greedy and sampled tokens of `rt` are the same with chaos delays.
pub fn race_check_of(mut rt: CudaRuntime, config: &ModelConfig) -> Result<(), Failed> {
    let prompt = SplitMix64(33).tokens(8, config.vocab_size);
    let sampled = SamplingParams { temperature: 0.9, seed: 3, ..Default::default() };
    let (greedy, _) = run(&mut rt, &prompt, 200, &SamplingParams::default(), &[])?;
    let (drawn, _) = run(&mut rt, &prompt, 32, &sampled, &[])?;
    // The runtime's own block size (a 7–8B width may not fit the default one).
    let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, ..Diagnostics::default() }, ..rt.options().clone() };
    rt.set_options(chaos).map_err(|e| e.to_string())?;
    let (g, _) = run(&mut rt, &prompt, 200, &SamplingParams::default(), &[])?;
    let (d, _) = run(&mut rt, &prompt, 32, &sampled, &[])?;
    ensure(ids(&g) == ids(&greedy) && ids(&d) == ids(&drawn), || "chaos changed the tokens".into())
}

/// Tensor parallelism over quantized shards (row splits, and the o/down column splits on
/// block boundaries): scored logits within the bf16 TP check's bound of one GPU, and
/// chaos on either rank changes no greedy token.
fn tp_quant_check() -> Check {
    let config = quant_models()[0].0.clone();
    let weights = synthetic_quant_weights(&config, 99, QuantMix::Q4KM);
    let tokens = SplitMix64(44).tokens(20, config.vocab_size);
    let one = runtime(&config, &weights)?.score(&tokens).map_err(|e| e.to_string())?;
    let gpus = super::tp_gpus();
    let rt = runtime_on(&config, &weights, &gpus, GpuWeights::Native)?;
    println!("  {}", rt.describe());
    super::tp::tp_agrees(rt, &one, &tokens, 100)
}

/// `--gpu-weights q8_0` quantizes float matrices at load (ggml's Q8_0): the same bits as
/// a model whose matrices were quantized on the host first and run natively.
fn q8_at_load_check() -> Check {
    let config = check_shapes()[0].clone();
    let float = peregrine_engine::lab::synthetic::synthetic_weights(&config, 99);
    let mut host = float.clone();
    let q8 = |t: &peregrine_engine::tensor::Tensor| -> Result<peregrine_engine::tensor::Tensor, Failed> {
        let v = t.to_f32().map_err(|e| e.to_string())?;
        Ok(peregrine_engine::gguf::quantize::q8_0_tensor(t.name.as_str(), t.shape.clone(), &v).map_err(|e| e.to_string())?)
    };
    for l in &mut host.layers {
        for t in [&mut l.q, &mut l.k, &mut l.v, &mut l.o, &mut l.gate, &mut l.up, &mut l.down] {
            *t = q8(t)?;
        }
    }
    if let Some(h) = &mut host.lm_head {
        *h = q8(h)?;
    }
    let tokens = SplitMix64(7).tokens(16, config.vocab_size);
    let at_load = runtime_on(&config, &float, &[0], GpuWeights::Q8_0)?.score(&tokens).map_err(|e| e.to_string())?;
    let native = runtime(&config, &host)?.score(&tokens).map_err(|e| e.to_string())?;
    ensure(at_load == native, || "q8_0 at load and host-quantized Q8_0 give different logits".into())
}

//! CI's check that the GPU kernels compile through the engine's own NVRTC path for
//! every benchmark shape, with no GPU: the decode kernel one GPU, at TP 2 and under
//! DTP, the diagnostics builds, and the batched prefill's kernels. Without libnvrtc
//! each test says so and does not run, except where `make test` points
//! PEREGRINE_NVRTC_DIR at the pinned wheel: there a missing NVRTC is a failure.
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use peregrine_engine::config::{LaneConfig, ModelConfig};
use peregrine_engine::cuda::{compile_only, layout, nvrtc, KernelOptions};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::synthetic::{check_shapes, ordinary, preset, PRESET_NAMES, SMALL_PRESETS};
use peregrine_engine::Diagnostics;

const ARCH: &str = "sm_90a";

/// The kernel cache `peregrine` uses (PEREGRINE_CUBIN_CACHE, else the user cache), so
/// a warm machine compiles nothing.
fn cache() -> Option<PathBuf> {
    let var = |v: &str| std::env::var_os(v).filter(|p| !p.is_empty()).map(PathBuf::from);
    var("PEREGRINE_CUBIN_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("peregrine/cubins")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/peregrine/cubins")))
}

/// Whether NVRTC loads (PEREGRINE_NVRTC_DIR first); prints why not when it does not.
fn nvrtc_loads() -> bool {
    let dir = std::env::var_os("PEREGRINE_NVRTC_DIR").map(PathBuf::from);
    match nvrtc::preload(&dir.clone().into_iter().collect::<Vec<_>>()) {
        Ok(()) => true,
        Err(e) => {
            assert!(dir.is_none(), "PEREGRINE_NVRTC_DIR is set but NVRTC does not load: {e}");
            eprintln!("did not run: {e}");
            false
        }
    }
}

/// The 0.1–2B presets plus the smallest one with the other head dims the kernels
/// special-case (96 MHA, 128 GQA with q/k/v bias, 256 MQA). (The 3–8B presets' default
/// kernel is compiled by the first test; their other builds differ from these only in sizes.)
fn presets_and_head_dims() -> Vec<ModelConfig> {
    let mut configs: Vec<_> = SMALL_PRESETS.iter().map(|n| preset(n).expect("preset")).collect();
    let small = configs[0].clone();
    for (hd, heads, kv_heads, bias) in [(96, 4, 4, false), (128, 4, 2, true), (256, 4, 1, false)] {
        configs.push(ModelConfig {
            name: format!("hd{hd}"),
            head_dim: hd,
            num_heads: heads,
            num_kv_heads: kv_heads,
            attention_bias: bias,
            ..small.clone()
        });
    }
    configs
}

#[test]
fn decode_kernel_compiles_for_every_preset_one_gpu_tp_and_dtp() {
    if !nvrtc_loads() {
        return;
    }
    let cache = cache();
    let base = KernelOptions::default();
    // laneformer-2b's matrices run as an ordinary model too (standard TP of them).
    let laneformer = preset("laneformer-2b").expect("preset");
    let plain = ordinary(&laneformer);
    for config in PRESET_NAMES.iter().map(|n| preset(n).expect("preset")).chain([plain.clone()]) {
        let name = &config.name;
        let bytes = compile_only(&config, &base, 1, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(bytes > 0, "{name}: empty cubin");
    }
    // Tensor parallelism: every rank's kernel at TP 2 for the shapes whose heads split.
    for config in ["qwen2.5-coder-1.5b", "smollm2-1.7b", "llama-3.2-1b"].map(|n| preset(n).expect("preset")).into_iter().chain([plain]) {
        let name = &config.name;
        let bytes = compile_only(&config, &base, 2, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("{name} tp 2: {e}"));
        assert!(bytes > 0, "{name}: empty cubin");
    }
    // DTP: the kernel each of laneformer-2b's own lanes runs, also with its early layer lane-local.
    for early_comm in [true, false] {
        let shape = ModelConfig { lanes: LaneConfig { early_comm, ..laneformer.lanes }, ..laneformer.clone() };
        let sched = DtpSchedule::of_laneformer(&shape).expect("schedule");
        let bytes = compile_only(&shape, &base, sched.lanes, Some(&sched), ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("dtp: {e}"));
        assert!(bytes > 0, "dtp: empty cubin");
    }
    // The opt-in one launch of every lane on one GPU (the published schedule).
    let sched = DtpSchedule::of_laneformer(&laneformer).expect("schedule");
    let one = KernelOptions { one_launch: true, ..base.clone() };
    let bytes = compile_only(&laneformer, &one, sched.lanes, Some(&sched), ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("dtp one launch: {e}"));
    assert!(bytes > 0, "dtp one launch: empty cubin");
    let odd = preset("smollm2-135m").expect("preset");
    let err = compile_only(&odd, &base, 2, None, ARCH, cache.as_deref()).expect_err("9 heads do not split over 2");
    assert!(err.to_string().contains("query heads"), "{err}");
}

/// The diagnostics build (chaos delays + phase trace) for every benchmark shape and the
/// other head dims (whose default build is compiled here too), and under TP 2 with the
/// two tensor-parallel switches not yet on by default.
#[test]
fn diagnostic_builds_compile_for_every_preset() {
    if !nvrtc_loads() {
        return;
    }
    let cache = cache();
    let base = KernelOptions::default();
    let checked = KernelOptions { diagnostics: Diagnostics { chaos: true, trace: true, chaos_rank: 0 }, ..base.clone() };
    for config in &presets_and_head_dims() {
        // (The presets' default kernels are the test above.)
        let is_preset = SMALL_PRESETS.iter().any(|n| preset(n).is_some_and(|p| p.name == config.name));
        let builds = if is_preset { vec![("chaos+trace", &checked)] } else { vec![("default", &base), ("chaos+trace", &checked)] };
        for (label, options) in builds {
            let (cubin, _) = nvrtc::cubin(cache.as_deref(), ARCH, &layout::defines(config, options, nvrtc::shared_per_block_of(ARCH)))
                .unwrap_or_else(|e| panic!("{} {label}: {e}", config.name));
            assert!(!cubin.is_empty(), "{} {label}: empty cubin", config.name);
        }
    }
    let llama = preset("llama-3.2-1b").expect("preset");
    compile_only(&llama, &checked, 2, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("chaos+trace tp 2: {e}"));
    let one_launch = KernelOptions { one_launch: true, ..checked.clone() };
    compile_only(&llama, &one_launch, 2, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("chaos+trace tp 2 one launch: {e}"));
    let tp_switches = KernelOptions { tp_down_waves: true, tp_weights_evict_first: true, ..checked };
    compile_only(&llama, &tp_switches, 2, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("tp switches tp 2: {e}"));
    // The opt-in device grammar mask (one GPU), with a bf16 and a quantized LM head.
    for lm_head_format in [0, 5] {
        let masked = KernelOptions { grammar_mask: true, weight_formats: if lm_head_format == 0 { 0 } else { 0b11_0000 }, lm_head_format, ..base.clone() };
        compile_only(&llama, &masked, 1, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("grammar mask, LM head format {lm_head_format}: {e}"));
    }
}

/// The batched prefill's kernels compile for every benchmark shape and for the other
/// head-dim splits (96 and 128 over two lanes, 256 over four, without the tensor-core
/// attention), and the cubin exports each entry point runtime/prefill/kernels.rs loads.
#[test]
fn prefill_kernels_compile() {
    if !nvrtc_loads() {
        return;
    }
    let cache = cache();
    for config in &presets_and_head_dims() {
        let options = KernelOptions::default();
        assert!(layout::prefill_shape(config).is_ok(), "{}", config.name);
        let (cubin, _) = nvrtc::cubin_of(
            nvrtc::PREFILL_SOURCE,
            cache.as_deref(),
            ARCH,
            &layout::defines(config, &options, nvrtc::shared_per_block_of(ARCH)),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", config.name));
        let has = |name: &str| cubin.windows(name.len()).any(|w| w == name.as_bytes());
        for name in ["pg_pf_embed", "pg_pf_rmsnorm", "pg_pf_qkv_rope", "pg_pf_attention", "pg_pf_swiglu", "pg_pf_add_parts"] {
            assert!(has(name), "{}: cubin lacks {name}", config.name);
        }
        let mma = layout::prefill_shape(config).map(|p| p.mma).unwrap_or(false);
        assert_eq!(has("pg_pf_attention_mma"), mma, "{}: tensor-core attention present iff the shape allows it", config.name);
    }
}

/// The decode kernel with quantized weights, for every benchmark shape: each build
/// enables all five formats for the layer matrices (so every format × shape is
/// compiled) with the LM head in a different format per shape, the check shapes (whose
/// odd dimensions fit some formats only), one TP 2 build, the pipelined row loop;
/// and the per-format check kernel (qcheck.cu) the GPU tests run.
#[test]
fn quantized_decode_kernels_compile() {
    if !nvrtc_loads() {
        return;
    }
    let cache = cache();
    // Bits 1..=5: Q8_0, Q4_0, Q4_1, Q4_K, Q6_K (cuda::quant::GpuFormat tags).
    let all_formats = 0b11_1110;
    for (i, name) in SMALL_PRESETS.iter().enumerate() {
        let config = preset(name).expect("preset");
        // A K-quant LM head needs whole 256-element rows.
        let lm = if config.hidden_size.is_multiple_of(256) { 1 + (i % 5) as u8 } else { 1 + (i % 3) as u8 };
        let options = KernelOptions { weight_formats: all_formats, lm_head_format: lm, ..KernelOptions::default() };
        let bytes = compile_only(&config, &options, 1, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("{name} quantized: {e}"));
        assert!(bytes > 0, "{name}: empty cubin");
    }
    // The check shapes: dimensions that are not whole blocks of every format (those
    // matrices run as bf16, and the kernel must still compile).
    for config in check_shapes() {
        let options = KernelOptions { weight_formats: all_formats, lm_head_format: 3, ..KernelOptions::default() };
        let (cubin, _) = nvrtc::cubin(cache.as_deref(), ARCH, &layout::defines(&config, &options, nvrtc::shared_per_block_of(ARCH)))
            .unwrap_or_else(|e| panic!("{} quantized: {e}", config.name));
        assert!(!cubin.is_empty(), "{}: empty cubin", config.name);
    }
    let llama = preset("llama-3.2-1b").expect("preset");
    let options = KernelOptions { weight_formats: 0b11_0000, lm_head_format: 5, ..KernelOptions::default() };
    compile_only(&llama, &options, 2, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("quantized tp 2: {e}"));
    // The opt-in pipelined row loop (`--gpu-q-pipeline`), the Q4_K_M mix at 256 threads.
    for name in ["llama-3.2-1b", "llama-3.1-8b"] {
        let config = preset(name).expect("preset");
        let piped = KernelOptions { weight_formats: 0b11_0000, lm_head_format: 5, threads: 256, quant_pipeline: true, ..KernelOptions::default() };
        compile_only(&config, &piped, 1, None, ARCH, cache.as_deref()).unwrap_or_else(|e| panic!("{name} quantized, pipelined: {e}"));
    }
    for k in [576, 2048] {
        let (cubin, _) = nvrtc::cubin_of(nvrtc::QCHECK_SOURCE, cache.as_deref(), ARCH, &layout::qcheck_defines(k))
            .unwrap_or_else(|e| panic!("qcheck {k}: {e}"));
        assert!(cubin.windows(9).any(|w| w == b"pg_qcheck"), "qcheck {k}: no entry point");
    }
    // The extra-row cost apparatus (gpu_check rows) at its default widths and counts.
    for (k, most) in [(2048, 8), (8192, 6), (576, 8)] {
        for nv in [1, most] {
            let (cubin, _) = nvrtc::cubin_of(nvrtc::ROWS_SOURCE, cache.as_deref(), ARCH, &layout::rows_cost_defines(k, nv))
                .unwrap_or_else(|e| panic!("rows cost {k} × {nv}: {e}"));
            assert!(cubin.windows(12).any(|w| w == b"pg_rows_cost"), "rows cost {k} × {nv}: no entry point");
        }
    }
}

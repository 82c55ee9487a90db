//! The host/kernel interface: slots, defines, shards and schedules checked without a GPU.

use super::*;

/// The H200's opt-in shared memory per block.
const H200: usize = 227 * 1024;

#[test]
fn summary_names_what_differs_from_the_default() {
    assert_eq!(KernelOptions::default().summary(), "default");
    let tuned = KernelOptions { threads: 448, kv_positions: 2048, ..KernelOptions::default() };
    assert_eq!(tuned.summary(), "threads: 448, kv_positions: 2048");
    let checked = KernelOptions { diagnostics: Diagnostics { chaos: true, ..Diagnostics::default() }, ..KernelOptions::default() };
    assert_eq!(checked.summary(), "chaos: true");
}

#[test]
fn names_become_screaming_snake() {
    assert_eq!(screaming("LmHead"), "LM_HEAD");
    assert_eq!(screaming("Wqkv"), "WQKV");
    assert_eq!(screaming("NPrompt"), "N_PROMPT");
}

#[test]
fn shards_split_heads_ffn_and_vocab_or_say_why_not() {
    let qwen = crate::lab::synthetic::preset("qwen2.5-coder-1.5b").expect("preset");
    let s2 = shard(&qwen, 2).expect("tp 2");
    assert_eq!((s2.num_heads, s2.num_kv_heads, s2.intermediate_size, s2.vocab_size), (6, 1, 4480, qwen.vocab_size / 2));
    assert_eq!((s2.hidden_size, s2.num_layers, s2.head_dim), (qwen.hidden_size, qwen.num_layers, qwen.head_dim));
    // 4 GPUs, 2 KV heads: each GPU keeps the KV head of its 3 query heads.
    let s4 = shard(&qwen, 4).expect("tp 4");
    assert_eq!((s4.num_heads, s4.num_kv_heads), (3, 1));
    assert!(shard(&qwen, 8).expect_err("12 heads over 8").contains("query heads"));
    assert!(shard(&qwen, 0).is_err() && shard(&qwen, 16).is_err());
    assert_eq!(shard(&qwen, 1).expect("tp 1"), qwen);
    let smol = crate::lab::synthetic::preset("smollm2-135m").expect("preset");
    assert!(shard(&smol, 2).is_err(), "9 heads do not split over 2");
    let d = defines_tp(&s2, &KernelOptions::default(), 2, qwen.vocab_size, None, H200);
    let get = |k: &str| d.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("PG_TP").as_deref(), Some("2"));
    assert_eq!(get("PG_NH").as_deref(), Some("6"));
    assert_eq!(get("PG_V_FULL"), Some(qwen.vocab_size.to_string()));
    // The plan's budget follows the device: the H200's 227 KiB less the margin.
    assert_eq!(get("PG_AHEAD_SMEM_BYTES"), Some((220 * 1024).to_string()));
}

#[test]
fn every_rank_gets_the_shard_shape_the_kernel_is_compiled_for() {
    // One kernel serves every rank, so ShardPlan's ranges must all have the sizes
    // `shard` reports, for every preset and degree the kernel accepts.
    // Laneformer presets by their matrices: their lanes shard them as tensor parallelism does.
    let mut checked = 0;
    for name in crate::lab::synthetic::PRESET_NAMES.iter().chain(crate::lab::synthetic::LANEFORMER_PRESETS) {
        let c = crate::lab::synthetic::ordinary(&crate::lab::synthetic::preset(name).expect("preset"));
        for tp in [1, 2, 4, 8] {
            let Ok(sh) = shard(&c, tp) else { continue };
            let plan = ShardPlan::new(&c, tp).expect("shard accepted it");
            for lane in &plan.lanes {
                let sizes = (lane.q_heads.len(), lane.kv_heads.len(), lane.ffn.len(), lane.vocab.len());
                assert_eq!(sizes, (sh.num_heads, sh.num_kv_heads, sh.intermediate_size, sh.vocab_size), "{name} tp {tp}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} (preset, degree) pairs shard");
}

#[test]
fn exchange_table_follows_the_dtp_schedule() {
    let shape = crate::lab::synthetic::preset("laneformer-2b").expect("preset");
    let sched = DtpSchedule::of_laneformer(&shape).expect("schedule");
    let t = exchange_table(shape.num_layers, Some(&sched));
    // delay 1, 15 layers, early layer all-reduced: 0 all-reduces, 1..13 add layer n-1
    // (the early layer's partials a second time at 1) and are sent, 14 is not sent.
    assert_eq!(t[0], (XMode::All, -1, true));
    assert_eq!(t[1], (XMode::Delayed, 0, true));
    assert_eq!(t[2], (XMode::Delayed, 1, true));
    assert_eq!(t[13], (XMode::Delayed, 12, true));
    assert_eq!(t[14], (XMode::Delayed, 13, false));
    // An early layer without communication is lane-local but still sent, for layer n+1.
    let none = ModelConfig { lanes: crate::config::LaneConfig { early_comm: false, ..shape.lanes }, ..shape.clone() };
    let t = exchange_table(shape.num_layers, Some(&DtpSchedule::of_laneformer(&none).expect("schedule")));
    assert_eq!(&t[..2], &[(XMode::Local, -1, true), (XMode::Delayed, 0, true)]);
    let standard = DtpSchedule::standard(&crate::lab::synthetic::ordinary(&shape), 2).expect("standard");
    assert!(exchange_table(shape.num_layers, Some(&standard)).iter().all(|&e| e == (XMode::All, -1, true)));
    assert_eq!(exchange_table(3, None), vec![(XMode::All, -1, true); 3]);
}

#[test]
fn defines_cover_every_slot_once() {
    let config = crate::lab::synthetic::preset("smollm2-135m").expect("preset");
    let d = defines(&config, &KernelOptions::default(), H200);
    let names: std::collections::HashSet<_> = d.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(names.len(), d.len(), "duplicate define");
    assert!(names.contains("PG_ARG_DEBUG_LOGITS") && names.contains("PG_LW_WGATE_UP"));
    assert_eq!(d.iter().find(|(k, _)| k == "PG_EPS").map(|(_, v)| v.as_str()), Some("1e-5f"));
}

#[test]
fn prefill_shape_covers_every_benchmark_head_dim() {
    for name in crate::lab::synthetic::PRESET_NAMES.iter().chain(crate::lab::synthetic::LANEFORMER_PRESETS) {
        let config = crate::lab::synthetic::preset(name).expect("preset");
        let pf = prefill_shape(&config).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(pf.queries_per_block * pf.dim_lanes * pf.key_lanes, PREFILL_ATTN_THREADS, "{name}");
        assert!(config.head_dim as u32 / pf.dim_lanes <= 64 && pf.key_tile.is_multiple_of(pf.key_lanes), "{name}: {pf:?}");
        let d = defines(&config, &KernelOptions::default(), H200);
        assert!(d.iter().any(|(k, v)| k == "PG_PF_TPQ" && *v == pf.dim_lanes.to_string()), "{name}");
    }
    let base = crate::lab::synthetic::preset("smollm2-135m").expect("preset");
    for (hd, lanes, mma) in [(64, 1, true), (96, 2, true), (128, 2, true), (256, 4, false), (144, 4, false), (40, 1, false)] {
        let pf = prefill_shape(&ModelConfig { head_dim: hd, ..base.clone() });
        assert_eq!(pf.map(|p| (p.dim_lanes, p.mma)), Ok((lanes, mma)), "head_dim {hd}");
    }
    // 200 = 4 × 50: 4-float chunks do not deal evenly over 4 lanes → per-token path, no PF defines.
    let odd = ModelConfig { head_dim: 200, ..base };
    assert!(prefill_shape(&odd).is_err());
    assert!(!defines(&odd, &KernelOptions::default(), H200).iter().any(|(k, _)| k.starts_with("PG_PF_")));
}

#[test]
fn one_gpu_and_tensor_parallel_kernels_get_their_schedules() {
    // A define of `name`'s kernel (rank 0) at degree `tp`.
    let define = |name: &str, o: &KernelOptions, tp: usize, key: &str| {
        let config = crate::lab::synthetic::preset(name).expect("preset");
        let shard = shard(&config, tp).expect("shard");
        defines_tp(&shard, o, tp, config.vocab_size, None, H200).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
    };
    let base = KernelOptions::default();
    let qwen = "qwen2.5-coder-1.5b";
    // down_waves and evict-first weights: one GPU always, under tensor parallelism only when asked.
    assert_eq!(define(qwen, &base, 1, "PG_DOWN_WAVES").as_deref(), Some("1"));
    assert_eq!(define(qwen, &base, 2, "PG_DOWN_WAVES").as_deref(), Some("0"));
    assert_eq!(define(qwen, &KernelOptions { tp_down_waves: true, ..base.clone() }, 2, "PG_DOWN_WAVES").as_deref(), Some("1"));
    assert!(!tagged_words_used(&base, 2) && tagged_words_used(&base, 1));
    assert!(tagged_words_used(&KernelOptions { tp_down_waves: true, ..base.clone() }, 2));
    assert_eq!(define(qwen, &base, 1, "PG_WEIGHT_EVICT_FIRST").as_deref(), Some("1"));
    assert_eq!(define(qwen, &base, 2, "PG_WEIGHT_EVICT_FIRST").as_deref(), Some("0"));
    let evict = KernelOptions { tp_weights_evict_first: true, ..base.clone() };
    assert_eq!(define(qwen, &evict, 2, "PG_WEIGHT_EVICT_FIRST").as_deref(), Some("1"));
    // Attention on blocks of its own: one GPU always, under TP with few heads per rank.
    assert_eq!(define(qwen, &base, 1, "PG_ATTN_OWN").as_deref(), Some("1"));
    assert_eq!(define(qwen, &base, 2, "PG_ATTN_OWN").as_deref(), Some("1"), "6 heads per rank");
    assert_eq!(define("smollm2-1.7b", &base, 2, "PG_ATTN_OWN").as_deref(), Some("0"), "16 heads per rank");
    let config = crate::lab::synthetic::preset(qwen).expect("preset");
    // Per layer: q/k/v (1536 + 2·256), attention output 1536, two residuals of 1536, activations 8960.
    assert_eq!(tagged_words(&config), 28 * (2048 + 1536 + 2 * 1536 + 8960));
    assert!(unsupported(&config, &KernelOptions { threads: 100, ..base }).is_some());
}

#[test]
fn start_step_has_a_slot() {
    let d = defines(&crate::lab::synthetic::preset("llama-3.2-1b").expect("preset"), &KernelOptions::default(), H200);
    let slot = d.iter().find(|(k, _)| k == "PG_ARG_START_STEP").map(|(_, v)| v.clone());
    assert_eq!(slot, Some(Arg::StartStep.index().to_string()));
}

#[cfg(feature = "cuda")]
#[test]
fn every_define_the_kernel_names_is_generated() {
    let config = crate::lab::synthetic::preset("llama-3.2-1b").expect("preset");
    let generated: std::collections::HashSet<String> = defines(
        &config,
        &KernelOptions { diagnostics: Diagnostics { chaos: true, trace: true, chaos_rank: 0 }, ..Default::default() },
        H200,
    )
    .into_iter()
    .map(|(k, _)| k)
    .collect();
    let qcheck: std::collections::HashSet<String> = super::qcheck_defines(512).into_iter().map(|(k, _)| k).collect();
    let rows_cost: std::collections::HashSet<String> = super::rows_cost_defines(2048, 4).into_iter().map(|(k, _)| k).collect();
    for (file, src) in super::super::nvrtc::KERNEL_SOURCES {
        let generated = match *file {
            "qcheck.cu" => &qcheck,
            "rows_cost.cu" => &rows_cost,
            _ => &generated,
        };
        let mut rest = *src;
        while let Some(at) = rest.find("PG_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            let name = &tail[..end];
            // ARG_PTR(T, NAME) pastes PG_ARG_##NAME: those names are checked below.
            if name != "PG_ARG_" && name != "PG_LW_" {
                assert!(generated.contains(name), "{file} uses {name}, which layout.rs does not define");
            }
            rest = &tail[end..];
        }
        for (prefix, table) in [("ARG_", Arg::NAMES), ("LW_", LayerSlot::NAMES)] {
            let macro_name =
                if prefix == "ARG_" { ["ARG_PTR(", "ARG_U32(", "ARG_F32("] } else { ["LAYER_PTR(", "LAYER_PTR(", "LAYER_PTR("] };
            for m in macro_name {
                for call in src.split(m).skip(1) {
                    let inner = &call[..call.find(')').unwrap_or(0)];
                    let name = inner.rsplit(',').next().unwrap_or("").trim();
                    let known: Vec<String> = table.iter().map(|n| screaming(n)).collect();
                    let is_macro_param = name == "NAME" || name == "SLOT";
                    assert!(
                        name.is_empty() || is_macro_param || known.iter().any(|k| k == name),
                        "{file}: {m}{inner}) names unknown slot {prefix}{name}"
                    );
                }
            }
        }
    }
}

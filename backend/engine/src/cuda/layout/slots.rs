//! The slot tables host and kernel share: the kernel's argument slots ([`Arg`]), the
//! per-rank buffers peers write into ([`PeerSlot`]) and the per-layer weight pointers
//! ([`LayerSlot`]), each handed to NVRTC as `PG_<PREFIX>_<NAME>` defines by `defines`.

/// Declares an enum of consecutive slots plus their names, for `PG_<PREFIX>_<NAME>`.
macro_rules! slots {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($(#[$vdoc])* $v),* }
        impl $name {
            /// Every slot, in slot order.
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            /// Slot names as written in Rust (CamelCase).
            pub const NAMES: &'static [&'static str] = &[$(stringify!($v)),*];
            /// Number of slots.
            pub const COUNT: usize = Self::ALL.len();
            /// This slot's index.
            pub fn index(self) -> usize { self as usize }
        }
    };
}

slots! {
    /// Kernel argument slots: one u64 each (pointers, integers, or f32 bits).
    Arg {
        /// Device array of `num_layers × LayerSlot::COUNT` weight pointers.
        Layers, Embed, LmHead, FinalNorm, InvFreq,
        Kv, X, Qkv, Attn,
        /// Split attention's partial states: `[heads × attn_max_splits × (head_dim + 2)]` f32.
        AttnPart,
        Act, Logits, Adj, Partials, Counters, Tokens, Seen,
        /// `[runs × vocab]` f32 of raw logits per LM-head run, or 0 (off).
        DebugLogits,
        StopIds,
        /// Device view of the host-mapped token ring.
        Ring,
        /// Device view of the host-mapped control words.
        HostCtl,
        NPrompt, MaxTokens,
        /// 1: run the prompt only, LM head at every position, no sampling (scoring).
        ScoreMode,
        /// First step the kernel runs: 0, or P-1 when the batched prefill (prefill.cu)
        /// already wrote positions 0..P-2 into the KV cache.
        StartStep,
        NStop, TopLogprobs, RepetitionPenalty, Temperature, TopK, TopP, MinP, Seed,
        /// Tensor parallelism: this launch's rank (0 ≤ rank < tp).
        Rank,
        /// Tensor parallelism: device array of `tp × PeerSlot::COUNT` pointers (every rank's buffers).
        Peers,
        /// Tensor parallelism: f32 `[hidden]`, the residual entering attention.
        Resid,
        /// Tensor parallelism: 1 when every rank needs every rank's logits (sampling, top log-probs).
        Gather,
        /// Unused (set to 0): the slot of a removed variant, kept so the argument layout
        /// of the measured kernels stays as it was (docs/lab/history.md, `fuse_o`).
        OPart,
        /// `trace`: u64 `[grid × pg_trace_events × TRACE_WORDS_PER_EVENT]` stamps (zeroed per run), or 0 (off).
        Trace,
        /// Unused (set to 0), as `OPart` (docs/lab/history.md, `fuse_down`).
        DownAcc,
        /// `trace`: the step whose phases are stamped.
        TraceStep,
        /// `tagged`: u64 `[layers × tagged_layer_words]` tagged words (zeroed per run; [`tagged_words`]).
        Tagged,
        /// f32 `[vocab]` added to the logits before the penalties (`logit_bias`), or 0 (none).
        LogitBias,
        /// u32 `[vocab]`: how often each token was generated in this run (the sampler counts;
        /// zeroed per run that has OpenAI penalties).
        Counts,
        PresencePenalty, FrequencyPenalty,
        /// `grammar_mask`: u32 `[vocab / 32]` allowed-token bits of the token being
        /// sampled (host-copied per token, `ctl::MASK_SEQ`), or 0 (an unconstrained run).
        Mask,
        /// `one_launch`: device array of `tp × Arg::COUNT` u64, every rank's argument
        /// block (rank 0's launch parameter names it; each rank's blocks read their own).
        RankArgs,
    }
}

slots! {
    /// Per-rank buffers every rank of a tensor-parallel run writes into (peer table).
    PeerSlot {
        /// The rank's exchange region (`pg_exchange_words` u32: counters, LM messages, DTP's final h).
        Exchange,
        /// The rank's receive slots (`pg_rx_floats` f32, sentinel-filled per run): partial sums from every rank.
        Rx,
        /// The rank's f32 `[vocab]` raw logits.
        Logits,
        /// The rank's f32 `[vocab]` penalised logits.
        Adj,
    }
}

slots! {
    /// Per-layer weight pointers (bf16 matrices `[out, in]`, f32 norms and biases).
    LayerSlot {
        /// q, k, v rows stacked: `[(heads + 2·kv_heads)·head_dim, hidden]`.
        Wqkv,
        /// f32 `[q+k+v rows]`, or 0 without attention bias.
        QkvBias,
        /// `[hidden, heads·head_dim]` row-major.
        Wo,
        /// gate and up rows interleaved: row 2j = gate_j, row 2j+1 = up_j.
        WgateUp,
        Wdown, AttnNorm, FfnNorm,
        /// The matrices' weight formats, one byte each (`quant::GpuFormat` tags; 0 = bf16):
        /// q, k, v, o, gate/up, down. Quantized matrices use the layout of cuda/quant.
        Fmts,
    }
}

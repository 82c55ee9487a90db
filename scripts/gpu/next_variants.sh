# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
# Defaults: session 4's unmeasured `attn_own` (v5+own1: attention on 9 blocks of its
# own, the matrices on the rest; perf-notes "v5", block_major) against the default v5
# (kernel-check: bit-identical logits + chaos), v4 / v5 / v5+own1 benched, v5+own1's
# phase trace. Variables are read on the GPU host too: pass the same overrides to
# next_session.sh as to build_next.sh.
check_kernel=${CHECK_KERNEL:-v5+own1}
bench_variants=${BENCH_VARIANTS:-v4,v5,v5+own1}
trace_variants=${TRACE_VARIANTS:-v5,v5+own1}

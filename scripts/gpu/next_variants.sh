# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
# Defaults: v5 (the default kernel) against v4 (kernel-check: bit-identical logits +
# chaos), both benched, v5's phase trace. Variables are read on the GPU host too: pass
# the same overrides to next_session.sh as to build_next.sh.
check_kernel=${CHECK_KERNEL:-v4}
bench_variants=${BENCH_VARIANTS:-v4,v5}
trace_variants=${TRACE_VARIANTS:-v5}

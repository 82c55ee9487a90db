# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
# Defaults: what the next session measures first — the final v4 (default) against v3
# (kernel-check: bit-identical logits + chaos), v4's bench and phase trace (the final
# combination of the staging ring with one wait for rows that fit was not run).
check_kernel=${CHECK_KERNEL:-v3}
bench_variants=${BENCH_VARIANTS:-v3,v4,v4+fuse-down}
trace_variants=${TRACE_VARIANTS:-v4}

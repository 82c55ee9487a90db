# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
# Defaults: session 5's v6 (each phase starts the next phase's weight copy before its
# wait) checked against v7 (after the wake; on one GPU the default v8 is the same kernel; kernel-check: logits within the
# variant bound + chaos), v6 / v7 benched, v7's phase trace, `correctness` on v7.
# Variables are read on the GPU host too: pass the same overrides to next_session.sh as
# to build_next.sh.
check_kernel=${CHECK_KERNEL:-v6}
bench_variants=${BENCH_VARIANTS:-v6,v7}
trace_variants=${TRACE_VARIANTS:-v7}
correctness_kernel=${CORRECTNESS_KERNEL:-v7}

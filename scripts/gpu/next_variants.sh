# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
# Defaults: session 4's v5 (attention spread over every block) checked against the
# default v6 (attention on blocks of its own, ops/attend_own.cuh; kernel-check: logits
# within the variant bound + chaos), v5 / v6 benched, v6's phase trace. Variables are
# read on the GPU host too: pass the same overrides to next_session.sh as to build_next.sh.
check_kernel=${CHECK_KERNEL:-v5}
bench_variants=${BENCH_VARIANTS:-v5,v6}
trace_variants=${TRACE_VARIANTS:-v6}

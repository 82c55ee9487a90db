# The kernel variants scripts/gpu/build_next.sh precompiles and next_session.sh runs
# (gpu_check variant names; `+` composes modifiers). Sourced by both; env overrides.
check_kernel=${CHECK_KERNEL:-v4}
bench_variants=${BENCH_VARIANTS:-v3,v4,v4+fuse-o+prefetch}
trace_variants=${TRACE_VARIANTS:-v4}

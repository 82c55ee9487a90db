#!/usr/bin/env bash
# Runs a command once the machine is quiet: benchmark figures on a shared box are
# noise while other jobs run. Waits until the 1-minute load average stays below
# QUIET_LOAD (default 0.5) for QUIET_CHECKS consecutive checks QUIET_EVERY seconds
# apart, gives up after QUIET_TIMEOUT seconds (exit 3).
# usage: scripts/bench/when_quiet.sh COMMAND [ARGS...]
set -euo pipefail
QUIET_LOAD="${QUIET_LOAD:-0.5}"
QUIET_CHECKS="${QUIET_CHECKS:-3}"
QUIET_EVERY="${QUIET_EVERY:-10}"
QUIET_TIMEOUT="${QUIET_TIMEOUT:-3600}"
start=$(date +%s)
streak=0
while (( streak < QUIET_CHECKS )); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v q="$QUIET_LOAD" 'BEGIN { exit !(l < q) }'; then
        streak=$((streak + 1))
    else
        streak=0
    fi
    if (( $(date +%s) - start > QUIET_TIMEOUT )); then
        echo "machine never quiet (load $load) within ${QUIET_TIMEOUT}s" >&2
        exit 3
    fi
    (( streak < QUIET_CHECKS )) && sleep "$QUIET_EVERY"
done
echo "quiet: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" >&2
exec "$@"

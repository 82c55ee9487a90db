#!/usr/bin/env python3
"""A/B of two builds of a bench, interleaved a few steps at a time.

Why: on a shared VM the speed of the machine drifts over seconds to minutes, so two
builds measured one after the other (even alternating whole invocations) can swap
places between runs. Here both stay loaded side by side and take turns: A runs a few
steps, then B, then A again..., so both see the same moments of the machine, and each
round's B/A ratio compares neighbours in time. Only one runs at a time (the idle one
blocks on its stdin; the fast runtime's workers park when idle).

On this project's VM the process started second ran ~5 % faster than the first, the
same binary on both sides, whichever order they then took turns in. So half the rounds
run with A started first and half with B first (two sessions), and the ratio is taken
over both; each session's median is printed too (A/A gave 0.95–0.99 and 1.05–1.06).

Protocol (``batch_step ... serve`` implements it): the command prints ``ready`` once
set up, then for each stdin line ``N`` runs N steps and prints their mean ms per step.

usage: interleave_ab.py --a "CMD A" --b "CMD B" [--rounds 100] [--steps 5]
  e.g. --a "/tmp/old/batch_step $MODEL 2 int16 4 100 serve" --b "/tmp/new/batch_step ..."
Prints, per build, the median / p25 / min ms per step, and the median of the rounds'
B/A ratios with its interquartile range (below 1: B is faster). Standard library only.
"""
import argparse
import shlex
import statistics
import subprocess
import sys


def start(cmd):
    """Starts a bench in serve mode and waits for its ``ready``."""
    p = subprocess.Popen(shlex.split(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    for line in p.stdout:
        if line.strip() == "ready":
            return p
    sys.exit(f"{cmd!r} ended before printing ready (exit {p.wait()})")


def measure(p, steps):
    """Mean ms per step of `steps` steps of the bench `p`."""
    p.stdin.write(f"{steps}\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        sys.exit(f"a bench ended mid-run (exit {p.wait()})")
    return float(line)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="command of build A (serve mode)")
    ap.add_argument("--b", required=True, help="command of build B (serve mode)")
    ap.add_argument("--rounds", type=int, default=100, help="turns of each build, half per session")
    ap.add_argument("--steps", type=int, default=5, help="steps per turn")
    args = ap.parse_args()
    times = {"A": [], "B": []}
    ratios = []
    for session, first in enumerate(["A", "B"]):
        cmds = {"A": args.a, "B": args.b}
        benches = {first: start(cmds[first])}
        second = "B" if first == "A" else "A"
        benches[second] = start(cmds[second])
        for p in benches.values():  # one untimed turn each
            measure(p, args.steps)
        mine = []
        for r in range(args.rounds // 2):
            # Alternate who goes first, so neither always follows the other.
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            got = {k: measure(benches[k], args.steps) for k in order}
            for k, v in got.items():
                times[k].append(v)
            mine.append(got["B"] / got["A"])
        for p in benches.values():
            p.stdin.close()
            p.wait()
        print(f"session {session + 1} ({first} started first): B/A median {statistics.median(mine):.3f}")
        ratios += mine
    for k in ("A", "B"):
        p25, med, _ = quartiles(times[k])
        print(f"{k}: median {med:.3f} ms/step, p25 {p25:.3f}, min {min(times[k]):.3f}  ({len(times[k])} turns of {args.steps} steps)")
    lo, med, hi = quartiles(ratios)
    print(f"B/A per round: median {med:.3f} (interquartile {lo:.3f}–{hi:.3f})")


if __name__ == "__main__":
    main()

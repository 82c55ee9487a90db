//! The phase trace's figures (`gpu_check trace`, the measuring apparatus): every
//! block's stamps of one step mapped onto one time axis, and per phase kind how long
//! blocks waited, the latency from the last producer's arrival to the first consumer's
//! wake (the cost of one dependency), the slowest block's work, and the phase's span on
//! the critical path. Host code only, so it is tested on the CPU with synthetic stamps.
//!
//! Each stamp is (global timer ns, SM cycle counter). The global timer is comparable
//! across SMs but may tick coarsely (about 1 µs on some parts); the cycle counter is
//! fine but per SM. One slope (ns per cycle, pooled over all blocks: every SM runs on
//! the same clock) and a per-block offset (the upper envelope of `global − slope·cycles`,
//! since a truncating timer only ever reads early) give fine times on a common axis.

use super::{events_for, RawTrace, ARRIVE, LAYER_PHASES, PHASES, TAIL_EVENTS, WAIT_END, WAIT_START, WORDS_PER_EVENT};

/// Name of event `e` ("GATE_UP", "LM", …) and its layer, if any.
pub fn event_name(layers: usize, e: usize) -> (&'static str, Option<usize>) {
    if e < layers * PHASES {
        (LAYER_PHASES[e % PHASES], Some(e / PHASES))
    } else {
        (TAIL_EVENTS[e - layers * PHASES], None)
    }
}

impl RawTrace {
    fn events(&self) -> usize {
        events_for(self.layers)
    }

    /// (global ns, cycles) of stamp `k` of event `e` in block `b`, if it was taken.
    fn stamp(&self, b: usize, e: usize, k: usize) -> Option<(u64, u64)> {
        let at = (b * self.events() + e) * WORDS_PER_EVENT + 2 * k;
        let (g, c) = (*self.words.get(at)?, *self.words.get(at + 1)?);
        (g != 0).then_some((g, c))
    }

    /// The event whose arrivals event `e`'s waiters wait for.
    fn producer(&self, e: usize) -> Option<usize> {
        let lp = self.layers * PHASES;
        if e >= lp {
            return match e - lp {
                0 => lp.checked_sub(1), // LM ← the last layer's DOWN
                1 => Some(lp),          // SAMPLER ← LM
                _ => Some(lp + 1),      // STEP ← SAMPLER
            };
        }
        let (l, p) = (e / PHASES, e % PHASES);
        match LAYER_PHASES[p] {
            "QKV" => (l > 0).then(|| (l - 1) * PHASES + 4),
            _ => Some(e - 1),
        }
    }
}

/// Stamps on one axis: ns since the earliest stamp, per (block, event, stamp).
#[derive(Debug, Clone)]
pub struct Timeline {
    blocks: usize,
    events: usize,
    times: Vec<Option<f64>>,
    /// Fitted ns per SM cycle (≈ 1 / clock in GHz).
    pub ns_per_cycle: f64,
}

impl Timeline {
    fn at(&self, b: usize, e: usize, k: usize) -> Option<f64> {
        self.times[(b * self.events + e) * 3 + k]
    }
}

/// Maps every stamp onto one axis (module doc); an error when the trace is empty or
/// holds too few stamps to fit the clock.
pub fn calibrate(raw: &RawTrace) -> Result<Timeline, String> {
    let events = raw.events();
    if raw.words.len() != raw.blocks * events * WORDS_PER_EVENT {
        return Err(format!("trace holds {} words, expected {} blocks × {events} events × {WORDS_PER_EVENT}", raw.words.len(), raw.blocks));
    }
    let per_block: Vec<Vec<(u64, u64)>> =
        (0..raw.blocks).map(|b| (0..events).flat_map(|e| (0..3).filter_map(move |k| raw.stamp(b, e, k))).collect()).collect();
    let g0 = per_block.iter().flatten().map(|s| s.0).min().ok_or("the trace holds no stamps (was the traced step reached?)")?;
    // Relative values first: absolute ns (~1e18) lose precision in an f64.
    let rel: Vec<Vec<(f64, f64)>> = per_block
        .iter()
        .map(|v| {
            let c0 = v.iter().map(|s| s.1).min().unwrap_or(0);
            v.iter().map(|&(g, c)| ((c.wrapping_sub(c0)) as f64, (g - g0) as f64)).collect()
        })
        .collect();
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for v in rel.iter().filter(|v| v.len() >= 2) {
        let n = v.len() as f64;
        let (mc, mg) = (v.iter().map(|s| s.0).sum::<f64>() / n, v.iter().map(|s| s.1).sum::<f64>() / n);
        num += v.iter().map(|s| (s.0 - mc) * (s.1 - mg)).sum::<f64>();
        den += v.iter().map(|s| (s.0 - mc).powi(2)).sum::<f64>();
    }
    if den <= 0.0 || num <= 0.0 {
        return Err("too few distinct stamps to fit the SM clock".into());
    }
    let slope = num / den;
    let mut times = vec![None; raw.blocks * events * 3];
    for (b, v) in rel.iter().enumerate() {
        let Some(offset) = v.iter().map(|&(c, g)| g - slope * c).reduce(f64::max) else { continue };
        let c0 = per_block[b].iter().map(|s| s.1).min().unwrap_or(0);
        for e in 0..events {
            for k in 0..3 {
                if let Some((_, c)) = raw.stamp(b, e, k) {
                    times[(b * events + e) * 3 + k] = Some(slope * c.wrapping_sub(c0) as f64 + offset);
                }
            }
        }
    }
    Ok(Timeline { blocks: raw.blocks, events, times, ns_per_cycle: slope })
}

/// One event's figures in one run, ns.
#[derive(Debug, Clone, PartialEq)]
pub struct EventFigures {
    pub name: &'static str,
    pub layer: Option<usize>,
    /// Blocks that waited for this event's inputs.
    pub waiters: usize,
    /// Median and longest time a waiting block sat in the wait.
    pub wait_median: f64,
    pub wait_max: f64,
    /// First consumer's wake minus the producers' last arrival: the dependency's latency.
    pub sync: f64,
    /// Last consumer's wake minus the producers' last arrival.
    pub wake_spread: f64,
    /// Longest wake → arrive of a waiting block (None for the step-start wait).
    pub work_slowest: Option<f64>,
    /// This event's last arrival (the step-start wait: its last wake) minus the producers'
    /// last arrival: the event's share of the critical path.
    pub span: f64,
}

/// Figures of every event with a recorded producer and waiters.
pub fn event_figures(raw: &RawTrace) -> Result<Vec<EventFigures>, String> {
    Ok(figures_on(raw, &calibrate(raw)?))
}

/// `event_figures` on stamps already mapped onto one axis.
fn figures_on(raw: &RawTrace, t: &Timeline) -> Vec<EventFigures> {
    let mut out = Vec::new();
    for e in 0..t.events {
        let Some(p) = raw.producer(e) else { continue };
        let Some(last) = (0..t.blocks).filter_map(|b| t.at(b, p, ARRIVE)).reduce(f64::max) else { continue };
        let waits: Vec<(f64, f64)> = (0..t.blocks).filter_map(|b| Some((t.at(b, e, WAIT_START)?, t.at(b, e, WAIT_END)?))).collect();
        if waits.is_empty() {
            continue;
        }
        let mut lens: Vec<f64> = waits.iter().map(|w| w.1 - w.0).collect();
        let first_wake = waits.iter().map(|w| w.1).fold(f64::INFINITY, f64::min);
        let last_wake = waits.iter().map(|w| w.1).fold(f64::NEG_INFINITY, f64::max);
        let work = (0..t.blocks).filter_map(|b| Some(t.at(b, e, ARRIVE)? - t.at(b, e, WAIT_END)?)).reduce(f64::max);
        let end = (0..t.blocks).filter_map(|b| t.at(b, e, ARRIVE)).reduce(f64::max).unwrap_or(last_wake);
        let (name, layer) = event_name(raw.layers, e);
        out.push(EventFigures {
            name,
            layer,
            waiters: waits.len(),
            wait_median: median(&mut lens),
            wait_max: lens.iter().cloned().fold(0.0, f64::max),
            sync: first_wake - last,
            wake_spread: last_wake - last,
            work_slowest: work,
            span: end - last,
        });
    }
    out
}

/// The traced step end to end, ns: what the per-phase medians leave out (layer 0's
/// q/k/v, whose producer is the untraced previous step, and the spread of layers around
/// the median).
#[derive(Debug, Clone, PartialEq)]
pub struct StepFigures {
    /// Layer 0's first q/k/v wake → the next step's last wake: the token's critical path.
    /// Kernels whose layer-0 q/k/v does not wait (one GPU's tagged kernel acquires the
    /// step chain at the step start, unstamped) start it at layer 0's first arrival instead.
    pub token_path: f64,
    /// Layer 0's q/k/v, first wake → last arrival (None where it does not wait).
    pub layer0_qkv: Option<f64>,
    /// Mean of the layers' own critical paths (Σ of their phases' spans; layer 0 counted
    /// where its q/k/v waits, otherwise left out of the mean).
    pub layer_mean: f64,
    /// Σ of the tail events' spans (LM head, sampler, next step's wake).
    pub tail: f64,
}

/// The step figures of one run (an error as `event_figures`, or when layer 0's q/k/v or
/// the next step's wake was not stamped).
pub fn step_figures(raw: &RawTrace) -> Result<StepFigures, String> {
    let t = &calibrate(raw)?;
    let figs = figures_on(raw, t);
    let stamps = |e: usize, k: usize| (0..t.blocks).filter_map(move |b| t.at(b, e, k));
    let qkv0_end = stamps(0, ARRIVE).reduce(f64::max).ok_or("layer 0's q/k/v has no arrival stamp")?;
    let first_wake = stamps(0, WAIT_END).reduce(f64::min);
    let start = match first_wake {
        Some(w) => w,
        None => stamps(0, ARRIVE).reduce(f64::min).ok_or("layer 0's q/k/v has no arrival stamp")?,
    };
    let next_wake = stamps(raw.layers * PHASES + 2, WAIT_END).reduce(f64::max).ok_or("the next step's wake was not stamped")?;
    let layer0_qkv = first_wake.map(|w| qkv0_end - w);
    let spans: f64 = figs.iter().filter(|f| f.layer.is_some()).map(|f| f.span).sum::<f64>() + layer0_qkv.unwrap_or(0.0);
    let counted = if layer0_qkv.is_some() { raw.layers } else { raw.layers.saturating_sub(1).max(1) };
    let tail = figs.iter().filter(|f| f.layer.is_none()).map(|f| f.span).sum();
    Ok(StepFigures { token_path: next_wake - start, layer0_qkv, layer_mean: spans / counted as f64, tail })
}

/// One line for `gpu_check trace`: medians over runs of the step figures, µs.
pub fn step_line(runs: &[StepFigures]) -> String {
    let med = |f: &dyn Fn(&StepFigures) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>()) / 1e3;
    let layer0 = if runs.iter().all(|r| r.layer0_qkv.is_some()) {
        format!("layer 0's q/k/v {:.2}", med(&|r| r.layer0_qkv.unwrap_or(0.0)))
    } else {
        "layer 0's q/k/v unstamped, left out".into()
    };
    format!(
        "traced step, medians of {} runs: token critical path {:.2} µs; layers {:.2} µs each on average ({layer0}); LM head, sampler and next wake {:.2} µs",
        runs.len(),
        med(&|r| r.token_path),
        med(&|r| r.layer_mean),
        med(&|r| r.tail)
    )
}

/// Medians over the instances (layers × runs) of one phase kind, µs.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseRow {
    pub name: &'static str,
    pub instances: usize,
    pub waiters: f64,
    pub wait_median_us: f64,
    pub wait_max_us: f64,
    pub sync_us: f64,
    pub wake_spread_us: f64,
    pub work_slowest_us: Option<f64>,
    pub span_us: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// One row per phase kind present in `figures` (kernel order), medians over instances.
pub fn summarize(figures: &[EventFigures]) -> Vec<PhaseRow> {
    let order = LAYER_PHASES.iter().chain(TAIL_EVENTS.iter());
    order
        .filter_map(|&name| {
            let of: Vec<&EventFigures> = figures.iter().filter(|f| f.name == name).collect();
            if of.is_empty() {
                return None;
            }
            let med = |f: &dyn Fn(&EventFigures) -> f64| median(&mut of.iter().map(|x| f(x)).collect::<Vec<_>>());
            let works: Vec<f64> = of.iter().filter_map(|x| x.work_slowest).collect();
            Some(PhaseRow {
                name,
                instances: of.len(),
                waiters: med(&|x| x.waiters as f64),
                wait_median_us: med(&|x| x.wait_median) / 1e3,
                wait_max_us: med(&|x| x.wait_max) / 1e3,
                sync_us: med(&|x| x.sync) / 1e3,
                wake_spread_us: med(&|x| x.wake_spread) / 1e3,
                work_slowest_us: (!works.is_empty()).then(|| median(&mut works.clone()) / 1e3),
                span_us: med(&|x| x.span) / 1e3,
            })
        })
        .collect()
}

/// The rows as a markdown table, with the per-layer critical path (Σ of the layer
/// phases' median spans).
pub fn table(rows: &[PhaseRow]) -> String {
    let mut s = String::from(
        "| phase | instances | waiting blocks | wait median µs | wait max µs | sync: last arrival → first wake µs | last wake µs | slowest work µs | span µs |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} |\n",
            r.name,
            r.instances,
            r.waiters,
            r.wait_median_us,
            r.wait_max_us,
            r.sync_us,
            r.wake_spread_us,
            r.work_slowest_us.map_or("—".into(), |w| format!("{w:.2}")),
            r.span_us
        );
    }
    let layer: f64 = rows.iter().filter(|r| LAYER_PHASES.contains(&r.name)).map(|r| r.span_us).sum();
    s += &format!("per-layer critical path (Σ median spans of the layer phases): {layer:.2} µs\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::rng::SplitMix64;

    /// A synthetic step with known latencies: every dependency wakes its first waiter
    /// `sync` ns after the producers' last arrival, and each waiter works `work(b)` ns.
    /// Stamps are written the way the kernel writes them, with a timer of `tick` ns.
    fn synthetic(layers: usize, blocks: usize, sync: f64, tick: u64) -> (RawTrace, f64) {
        let events = events_for(layers);
        let mut words = vec![0u64; blocks * events * WORDS_PER_EVENT];
        let mut rng = SplitMix64(42);
        let t0: u64 = 1_764_500_000_000_000_000; // a Unix-ns-sized base
                                                 // Per-block cycle counter: its own origin, 1.98 cycles per ns.
        let origin: Vec<u64> = (0..blocks).map(|b| 1_000_000 + 7_777_777 * b as u64).collect();
        let mut put = |b: usize, e: usize, k: usize, t: f64| {
            let at = (b * events + e) * WORDS_PER_EVENT + 2 * k;
            words[at] = (t0 + t as u64) / tick * tick;
            words[at + 1] = origin[b] + (t * 1.98) as u64;
        };
        let slowest = 1_500.0;
        let mut clock = 10_000.0;
        for e in 0..events {
            let (name, _) = event_name(layers, e);
            let last = clock;
            let waiters: Vec<usize> = match name {
                "ATTN" => (0..blocks / 2).collect(),
                "SAMPLER" => vec![0],
                _ => (0..blocks).collect(),
            };
            let mut end: f64 = last;
            for b in 0..blocks {
                if let Some(i) = waiters.iter().position(|&w| w == b) {
                    let wake = last + sync + if i == 0 { 0.0 } else { 50.0 + (rng.next_u64() % 200) as f64 };
                    let work = if i == waiters.len() - 1 { slowest } else { 300.0 + (rng.next_u64() % 1000) as f64 };
                    put(b, e, WAIT_START, last - 800.0);
                    put(b, e, WAIT_END, wake);
                    if name != "STEP" {
                        put(b, e, ARRIVE, wake + work);
                        end = end.max(wake + work);
                    }
                } else if name != "STEP" && name != "SAMPLER" {
                    put(b, e, ARRIVE, last - 400.0);
                }
            }
            clock = end;
        }
        (RawTrace { blocks, layers, step: 40, words }, slowest)
    }

    #[test]
    fn recovers_sync_latency_and_work_from_fine_and_coarse_timers() {
        for (tick, tol) in [(1u64, 2.0), (1_000, 150.0)] {
            {
                let (raw, slowest) = synthetic(24, 12, 700.0, tick);
                let figs = event_figures(&raw).expect("figures");
                for f in &figs {
                    assert!((f.sync - 700.0).abs() < tol, "tick {tick}: {} layer {:?}: sync {}", f.name, f.layer, f.sync);
                    if let Some(w) = f.work_slowest {
                        assert!((w - slowest).abs() < tol, "tick {tick}: {} work {w}", f.name);
                    }
                }
                let rows = summarize(&figs);
                let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
                assert_eq!(names, vec!["QKV", "ATTN", "O", "GATE_UP", "DOWN", "LM", "SAMPLER", "STEP"]);
                let qkv = &rows[0];
                // Layer 0's QKV waits for the previous step's LM head, which is not traced.
                assert_eq!(qkv.instances, 23);
                assert!((qkv.wait_median_us - 1.5).abs() < 0.4, "wait {}", qkv.wait_median_us);
                assert!((rows[1].waiters - 6.0).abs() < 1e-9, "half the blocks wait for attention");
                assert!(table(&rows).contains("| GATE_UP |"));
            }
        }
    }

    #[test]
    fn the_step_figures_add_up_to_the_token() {
        let (raw, _) = synthetic(6, 8, 700.0, 1);
        let st = step_figures(&raw).expect("step figures");
        // The chain is contiguous in the synthetic step: the parts sum to the whole path.
        let parts = st.layer_mean * 6.0 + st.tail;
        assert!((parts - st.token_path).abs() < 5.0, "parts {parts} vs path {}", st.token_path);
        // Layer 0's q/k/v: first wake (no producer: it starts the chain) to the arrival of its
        // last waiter, which woke 50–250 ns after the first and works 1,500 ns.
        let l0 = st.layer0_qkv.expect("layer 0 waits in the synthetic step");
        assert!((1_545.0..1_755.0).contains(&l0), "layer 0 q/k/v {l0}");
        assert!(step_line(&[st.clone(), st]).contains("token critical path"));
        // A kernel whose layer-0 q/k/v does not wait (no wake stamps): the path starts at
        // layer 0's first arrival and layer 0 leaves the mean.
        let (mut raw, _) = synthetic(6, 8, 700.0, 1);
        let events = events_for(6);
        for b in 0..8 {
            for k in [WAIT_START, WAIT_END] {
                let at = (b * events) * WORDS_PER_EVENT + 2 * k;
                raw.words[at] = 0;
                raw.words[at + 1] = 0;
            }
        }
        let st = step_figures(&raw).expect("step figures without layer 0's wait");
        assert_eq!(st.layer0_qkv, None);
        assert!(st.token_path > st.tail && st.layer_mean > 0.0);
        assert!(step_line(&[st]).contains("unstamped"));
    }

    #[test]
    fn an_empty_or_misshapen_trace_is_an_error() {
        let raw = RawTrace { blocks: 2, layers: 1, step: 0, words: vec![0; 2 * events_for(1) * WORDS_PER_EVENT] };
        assert!(event_figures(&raw).unwrap_err().contains("no stamps"));
        let short = RawTrace { words: vec![1; 5], ..raw };
        assert!(calibrate(&short).unwrap_err().contains("expected"));
    }

    #[test]
    fn producers_follow_the_kernel_dependencies() {
        let raw = RawTrace { blocks: 1, layers: 2, step: 0, words: Vec::new() };
        let ev = |l: usize, p: &str| l * PHASES + LAYER_PHASES.iter().position(|&n| n == p).expect("phase");
        assert_eq!(raw.producer(ev(0, "QKV")), None);
        assert_eq!(raw.producer(ev(1, "QKV")), Some(ev(0, "DOWN")));
        assert_eq!(raw.producer(ev(1, "GATE_UP")), Some(ev(1, "O")));
        assert_eq!(raw.producer(10), Some(ev(1, "DOWN")), "LM waits for the last DOWN");
        assert_eq!(raw.producer(11), Some(10));
        assert_eq!(raw.producer(12), Some(11));
    }
}

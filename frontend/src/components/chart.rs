//! A small live chart of decode tokens/s over the request (SVG polyline).

use leptos::prelude::*;

use crate::state::Playground;

/// Chart size in SVG units; it scales to its box.
const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 64.0;
/// Headroom above the peak, so the line never touches the top.
const HEADROOM: f64 = 1.15;

/// Tokens/s samples of the current run as a line.
#[component]
pub fn Chart() -> impl IntoView {
    let pg = expect_context::<Playground>();
    let geometry = Memo::new(move |_| {
        pg.run.with(|r| {
            let s = &r.samples;
            // The time axis spans the samples (decode starts after the first token).
            let t_min = s.first().map_or(0.0, |p| p.0);
            let span = (s.iter().map(|p| p.0).fold(t_min, f64::max) - t_min).max(1.0);
            let v_max = s.iter().map(|p| p.1).fold(0.0_f64, f64::max);
            let y_max = (v_max * HEADROOM).max(1.0);
            let y = |v: f64| HEIGHT - v / y_max * HEIGHT;
            let mut points: Vec<(f64, f64)> = s.iter().map(|(t, v)| ((t - t_min) / span * WIDTH, y(*v))).collect();
            if let [only] = points[..] {
                points.push((WIDTH, only.1));
            }
            let line = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ");
            let area = match (points.first(), points.last()) {
                (Some(first), Some(last)) => {
                    let path = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" L");
                    format!("M{:.1},{HEIGHT} L{path} L{:.1},{HEIGHT} Z", first.0, last.0)
                }
                _ => String::new(),
            };
            (line, area, v_max, s.len())
        })
    });
    let label = move || {
        let (_, _, peak, n) = geometry.get();
        if n == 0 {
            "Tokens per second over the request: no samples yet".to_string()
        } else {
            format!("Tokens per second over the request: {n} samples, peak {}", peregrine_frontend::format::tok_per_s(Some(peak)))
        }
    };
    view! {
        <figure class="chart" data-testid="chart">
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") preserveAspectRatio="none" role="img" aria-label=label>
                <path class="chart-area" d=move || geometry.get().1></path>
                <polyline class="chart-line" points=move || geometry.get().0 fill="none" vector-effect="non-scaling-stroke"></polyline>
            </svg>
            <figcaption>
                "tok/s over time"
                <span class="chart-peak">
                    {move || {
                        let (_, _, peak, n) = geometry.get();
                        if n == 0 { String::new() } else { format!(" · peak {}", peregrine_frontend::format::tok_per_s(Some(peak))) }
                    }}
                </span>
            </figcaption>
        </figure>
    }
}

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
            let t_max = s.iter().map(|p| p.0).fold(0.0_f64, f64::max).max(1.0);
            let v_max = s.iter().map(|p| p.1).fold(0.0_f64, f64::max);
            let y_max = (v_max * HEADROOM).max(1.0);
            let points: Vec<String> =
                s.iter().map(|(t, v)| format!("{:.1},{:.1}", t / t_max * WIDTH, HEIGHT - v / y_max * HEIGHT)).collect();
            let line = points.join(" ");
            let area = if points.is_empty() {
                String::new()
            } else {
                let first_x = s[0].0 / t_max * WIDTH;
                let last_x = s[s.len() - 1].0 / t_max * WIDTH;
                format!("M{first_x:.1},{HEIGHT} L{} L{last_x:.1},{HEIGHT} Z", points.join(" L"))
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

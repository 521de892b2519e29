//! A self-contained SVG of latency distributions: one panel per scenario
//! (and per waiter count), one CDF line per implementation, time on a log
//! axis.

use std::fmt::Write;

use super::Series;

/// Panel size and margins, in SVG units.
const WIDTH: f64 = 560.0;
/// Height of one panel.
const HEIGHT: f64 = 260.0;
/// Left margin (y labels).
const LEFT: f64 = 60.0;
/// Other margins.
const MARGIN: f64 = 30.0;
/// Points per line: enough to look smooth, few enough to stay small.
const POINTS: usize = 200;
/// Line colours, by position in the panel.
const COLOURS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// The SVG document for `series`, grouped into panels by `panel`, two per row.
pub(crate) fn render(title: &str, series: &[Series]) -> String {
    let mut panels: Vec<&str> = Vec::new();
    for s in series {
        if !panels.contains(&s.panel.as_str()) {
            panels.push(&s.panel);
        }
    }
    let rows = panels.len().div_ceil(2).max(1);
    let (w, h) = (WIDTH * 2.0, HEIGHT * rows as f64 + 40.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let x0 = (i % 2) as f64 * WIDTH;
        let y0 = 40.0 + (i / 2) as f64 * HEIGHT;
        let lines: Vec<&Series> = series.iter().filter(|s| s.panel == *panel).collect();
        draw_panel(&mut out, x0, y0, panel, &lines);
    }
    out.push_str("</svg>\n");
    out
}

/// One panel: axes, decade grid, a CDF per series, a legend.
fn draw_panel(out: &mut String, x0: f64, y0: f64, title: &str, lines: &[&Series]) {
    let (px, py) = (x0 + LEFT, y0 + MARGIN);
    let (pw, ph) = (WIDTH - LEFT - MARGIN, HEIGHT - 2.0 * MARGIN - 10.0);
    let positive = lines
        .iter()
        .flat_map(|s| s.sorted_us.iter().copied())
        .filter(|v| *v > 0.0 && v.is_finite());
    let (lo, hi) = positive.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo <= hi {
        (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    } else {
        (0.0, 1.0)
    };
    let x = |us: f64| px + (us.max(10f64.powf(lo)).log10() - lo) / (hi - lo) * pw;
    let y = |f: f64| py + ph - f * ph;
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>"#,
        px + pw / 2.0,
        y0 + 18.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
    );
    let mut decade = lo;
    while decade <= hi {
        let gx = x(10f64.powf(decade));
        let _ = writeln!(
            out,
            r##"<line x1="{gx:.1}" y1="{py}" x2="{gx:.1}" y2="{}" stroke="#ddd"/><text x="{gx:.1}" y="{}" text-anchor="middle">{}</text>"##,
            py + ph,
            py + ph + 14.0,
            decade_label(decade)
        );
        decade += 1.0;
    }
    for f in [0.0, 0.5, 0.9, 0.99, 1.0] {
        let gy = y(f);
        let _ = writeln!(
            out,
            r##"<line x1="{px}" y1="{gy:.1}" x2="{}" y2="{gy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{f}</text>"##,
            px + pw,
            px - 4.0,
            gy + 4.0
        );
    }
    for (i, s) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let n = s.sorted_us.len();
        if n == 0 {
            continue;
        }
        let step = (n / POINTS).max(1);
        let mut points = String::new();
        let mut k = 0;
        while k < n {
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x(s.sorted_us[k]),
                y((k + 1) as f64 / n as f64)
            );
            k += step;
        }
        let _ = write!(points, "{:.1},{:.1}", x(s.sorted_us[n - 1]), y(1.0));
        let _ = writeln!(
            out,
            r#"<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#
        );
        let ly = py + 14.0 + 14.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{} (n={n})</text>"#,
            px + 8.0,
            px + 26.0,
            px + 30.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
}

/// `1us`, `10us`, `100us`, `1ms`, ... for a power of ten of microseconds.
fn decade_label(decade: f64) -> String {
    let us = 10f64.powf(decade);
    if us < 1e3 {
        format!("{us:.0}us")
    } else if us < 1e6 {
        format!("{:.0}ms", us / 1e3)
    } else {
        format!("{:.0}s", us / 1e6)
    }
}

/// Text safe inside SVG.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_polyline_per_series_and_escapes_text() {
        let series = vec![
            Series {
                panel: "a <b>".into(),
                label: "x".into(),
                sorted_us: vec![10.0, 20.0, 3000.0],
            },
            Series {
                panel: "a <b>".into(),
                label: "y".into(),
                sorted_us: vec![],
            },
            Series {
                panel: "c".into(),
                label: "z".into(),
                sorted_us: vec![5.0],
            },
        ];
        let svg = render("t", &series);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt;b&gt;"));
        assert!(!svg.contains("NaN"));
    }
}

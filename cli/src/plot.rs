//! The comparison chart of `btl … --baseline --svg PATH`: the BTL's and the
//! raw socket's figures against message size, on log scales, as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::bench::{Row, Test};

/// What a chart shows of a row: latency for ping-pong, bandwidth otherwise.
fn value(test: Test, r: &Row) -> f64 {
    match test {
        Test::PingPong => r.median_us,
        Test::Bandwidth => r.mib_per_s,
        Test::Rate => r.msgs_per_s,
    }
}

/// Draws `btl` against `raw` (same sizes) into an SVG file at `path`,
/// their lines named as `names` says (`["btl tcp", "raw tcp"]`).
pub fn compare(
    path: &Path,
    title: &str,
    test: Test,
    [btl, raw]: [(&str, &[Row]); 2],
) -> Result<(), Box<dyn std::error::Error>> {
    let ((btl_name, btl), (raw_name, raw)) = (btl, raw);
    let points = |rows: &[Row]| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|r| (r.size.max(1) as f64, value(test, r).max(1e-3)))
            .collect()
    };
    let (b, r) = (points(btl), points(raw));
    let all = b.iter().chain(r.iter());
    let (x0, x1) = all
        .clone()
        .fold((f64::MAX, 1.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let (y0, y1) = all.fold((f64::MAX, 1e-3f64), |(lo, hi), p| {
        (lo.min(p.1), hi.max(p.1))
    });
    let y_label = match test {
        Test::PingPong => "median one-way latency (µs)",
        Test::Bandwidth => "bandwidth (MiB/s)",
        Test::Rate => "messages per second",
    };
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0.min(x1)..x1 * 1.5).log_scale(),
            (y0.min(y1) / 1.5..y1 * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_label)
        .draw()?;
    for (name, series, color) in [(btl_name, &b, &BLUE), (raw_name, &r, &RED)] {
        chart
            .draw_series(LineSeries::new(series.iter().copied(), color))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(series.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

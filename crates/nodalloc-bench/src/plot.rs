//! Line plots of the report, drawn with `plotters`; called by
//! [`Report::write`](crate::report::Report::write) for every plot its data fills.
//!
//! PNGs need a TrueType font for their labels; one is looked up among the
//! usual system font directories (no fontconfig). Without one the plot is
//! written as SVG instead, whose text the viewer renders.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One plot: a line per allocator.
#[derive(Clone, Debug)]
pub struct PlotSpec {
    /// File stem, e.g. `latency_cdf`.
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// (allocator, points), points sorted by x.
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;

/// Directories searched for a sans-serif TrueType font, in order.
const FONT_DIRS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu",
    "/usr/share/fonts/truetype",
    "/usr/share/fonts",
    "/usr/local/share/fonts",
];

/// Registers a system font with plotters once; false when none was found.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let Some(bytes) = find_font() else {
            return false;
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        ["sans-serif", "serif", "monospace"].iter().all(|family| {
            plotters::style::register_font(family, FontStyle::Normal, bytes).is_ok()
                && plotters::style::register_font(family, FontStyle::Bold, bytes).is_ok()
        })
    })
}

fn find_font() -> Option<Vec<u8>> {
    let preferred = [
        "DejaVuSans.ttf",
        "LiberationSans-Regular.ttf",
        "FreeSans.ttf",
    ];
    for dir in FONT_DIRS {
        for name in preferred {
            if let Ok(b) = std::fs::read(Path::new(dir).join(name)) {
                return Some(b);
            }
        }
    }
    // Any .ttf, two levels deep.
    for dir in FONT_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let files: Vec<PathBuf> = if p.is_dir() {
                std::fs::read_dir(&p)
                    .map(|d| d.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default()
            } else {
                vec![p]
            };
            for f in files {
                if f.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
                    if let Ok(b) = std::fs::read(&f) {
                        return Some(b);
                    }
                }
            }
        }
    }
    None
}

/// Draws `spec` into `dir` as `NAME.png` (or `NAME.svg` without a font) and
/// returns the path.
pub fn line_plot(dir: &Path, spec: &PlotSpec) -> Result<PathBuf, String> {
    if spec.lines.iter().all(|(_, p)| p.is_empty()) {
        return Err("no data".into());
    }
    if font_ready() {
        let path = dir.join(format!("{}.png", spec.name));
        {
            let root = BitMapBackend::new(&path, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, spec)?;
            root.present().map_err(|e| e.to_string())?;
        }
        Ok(path)
    } else {
        let path = dir.join(format!("{}.svg", spec.name));
        {
            let root = SVGBackend::new(&path, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, spec)?;
            root.present().map_err(|e| e.to_string())?;
        }
        Ok(path)
    }
}

/// The data's range on one axis, padded, positive for log axes.
/// Every allocator the showdown knows, in the order of their colours: an allocator keeps its
/// colour in every plot, whichever lines the plot has.
const KNOWN: &[&str] = &[
    "nodalloc",
    "glibc",
    "mimalloc",
    "jemalloc",
    "snmalloc",
    "numalloc",
    "tcmalloc",
    "nodalloc-secure",
    "nodalloc-callsite",
    "nodalloc-background",
    "nodalloc-profile",
    "jemalloc-prof",
];

/// The palette index of the line `name`, the `i`-th of its plot: a known allocator's own
/// index, any other line one past them.
fn colour_index(name: &str, i: usize) -> usize {
    KNOWN
        .iter()
        .position(|known| *known == name)
        .unwrap_or(KNOWN.len() + i)
}

fn bounds(values: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        lo /= 1.3;
        hi *= 1.3;
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.01).max(1e-9);
        lo = if lo >= 0.0 {
            0.0f64.max(lo - pad)
        } else {
            lo - pad
        };
        hi += pad;
    }
    lo..hi
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, spec: &PlotSpec) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let xs = bounds(
        spec.lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)),
        spec.log_x,
    );
    let ys = bounds(
        spec.lines.iter().flat_map(|l| l.1.iter().map(|p| p.1)),
        spec.log_y,
    );
    match (spec.log_x, spec.log_y) {
        (false, false) => draw_in(root, spec, xs, ys),
        (true, false) => draw_in(root, spec, xs.log_scale(), ys),
        (false, true) => draw_in(root, spec, xs, ys.log_scale()),
        (true, true) => draw_in(root, spec, xs.log_scale(), ys.log_scale()),
    }
}

fn draw_in<DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    spec: &PlotSpec,
    x: X,
    y: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&spec.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(&spec.x_label)
        .y_desc(&spec.y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (i, (name, points)) in spec.lines.iter().enumerate() {
        let color = Palette99::pick(colour_index(name, i)).to_rgba();
        let width = if name == crate::report::SUBJECT { 3 } else { 2 };
        let style = color.stroke_width(width);
        let points: Vec<(f64, f64)> = points
            .iter()
            .copied()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .filter(|(a, b)| (!spec.log_x || *a > 0.0) && (!spec.log_y || *b > 0.0))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if points.len() <= 40 {
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod colour_tests {
    use super::colour_index;

    #[test]
    fn an_allocator_keeps_its_colour_whatever_the_lines_of_the_plot() {
        // nodalloc first in one plot, third in another: the same colour.
        assert_eq!(colour_index("nodalloc", 0), colour_index("nodalloc", 2));
        assert_eq!(colour_index("tcmalloc", 6), colour_index("tcmalloc", 1));
        assert_ne!(colour_index("nodalloc", 0), colour_index("glibc", 0));
        // Lines that are no allocator never take a known allocator's colour.
        assert!(colour_index("P = 64", 0) >= super::KNOWN.len());
    }
}

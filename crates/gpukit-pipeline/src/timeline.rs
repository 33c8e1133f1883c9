//! The timeline of a run: one lane per stream and host thread, one span per stage of each
//! batch, exported as Chrome trace JSON and as an SVG picture.

use std::fmt::Write as _;

use crate::error::Stage;

/// A row of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The loader (a thread of its own in the buffered patterns).
    Loader,
    /// The one stream of the sequential pattern.
    Stream(usize),
    /// The upload stream.
    Upload,
    /// Compute stream `k`.
    Compute(usize),
    /// The download stream.
    Download,
    /// The calling thread, delivering results.
    Host,
}

impl Lane {
    /// The lane's label.
    pub fn label(self) -> String {
        match self {
            Lane::Loader => "loader (host)".into(),
            Lane::Stream(k) => format!("stream {k}"),
            Lane::Upload => "upload stream".into(),
            Lane::Compute(k) => format!("compute stream {k}"),
            Lane::Download => "download stream".into(),
            Lane::Host => "sink (host)".into(),
        }
    }
}

/// One stage of one batch on the timeline, in milliseconds from the run's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// Where it ran.
    pub lane: Lane,
    /// Which stage.
    pub stage: Stage,
    /// Which batch.
    pub batch: usize,
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
}

impl Span {
    /// Its length in ms.
    pub fn ms(&self) -> f64 {
        (self.end_ms - self.start_ms).max(0.0)
    }
}

/// The timeline of a run: device stages timed by events, host stages by the host clock
/// (both measured from the run's start event).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The lanes, top to bottom.
    pub lanes: Vec<Lane>,
    /// Every stage of every batch.
    pub spans: Vec<Span>,
    /// A title for pictures (pattern and backend).
    pub title: String,
}

impl Timeline {
    /// The timeline as Chrome trace JSON (open it in Perfetto or `chrome://tracing`): one
    /// thread per lane, one complete event (`"ph":"X"`) per stage of each batch, in µs.
    pub fn to_chrome_trace(&self) -> String {
        chrome_trace(&[("", self)], &self.title)
    }

    /// The timeline as an SVG picture: one lane per stream (and the loader and sink), one
    /// box per stage of each batch, coloured by stage and labelled with the batch.
    pub fn to_svg(&self) -> String {
        svg(&[("", self)], &self.title)
    }

    /// Writes [`Timeline::to_chrome_trace`] to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_chrome_trace())
    }

    /// Writes [`Timeline::to_svg`] to `path`.
    pub fn write_svg(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

/// Chrome trace JSON of one or more timelines: one process per timeline (named by its label,
/// else `title`), one thread per lane, one complete event per stage of each batch, in µs.
fn chrome_trace(parts: &[(&str, &Timeline)], title: &str) -> String {
    let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    let mut first = true;
    let mut push = |line: String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
        out.push_str(&line);
    };
    for (p, (label, t)) in parts.iter().enumerate() {
        let pid = p + 1;
        let name = if label.is_empty() {
            title.to_string()
        } else {
            format!("{label}: {}", t.title)
        };
        push(format!(
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{}\"}}}}",
            escape(&name)
        ));
        for (tid, lane) in t.lanes.iter().enumerate() {
            push(format!(
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{}\"}}}}",
                escape(&lane.label())
            ));
            push(format!(
                "{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
            ));
        }
        for s in &t.spans {
            let tid = t.lanes.iter().position(|l| *l == s.lane).unwrap_or(0);
            push(format!(
                "{{\"name\":\"{} {}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"batch\":{}}}}}",
                s.stage,
                s.batch,
                s.stage,
                s.start_ms * 1e3,
                s.ms() * 1e3,
                s.batch
            ));
        }
    }
    out.push_str("\n]}\n");
    out
}

/// An SVG picture of one or more timelines on one time axis, their lanes stacked (each
/// labelled with its timeline's label, when it has one), one box per stage of each batch,
/// coloured by stage and labelled with the batch.
fn svg(parts: &[(&str, &Timeline)], title: &str) -> String {
    const LEFT: f64 = 190.0;
    const WIDTH: f64 = 1100.0;
    const LANE_H: f64 = 28.0;
    const TOP: f64 = 40.0;
    // Every lane of every part, top to bottom, with its label.
    let rows: Vec<(usize, Lane, String)> = parts
        .iter()
        .enumerate()
        .flat_map(|(p, (label, t))| {
            t.lanes.iter().map(move |&lane| {
                let text = if label.is_empty() {
                    lane.label()
                } else {
                    format!("{label}: {}", lane.label())
                };
                (p, lane, text)
            })
        })
        .collect();
    let end = parts
        .iter()
        .flat_map(|(_, t)| t.spans.iter())
        .map(|s| s.end_ms)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let scale = WIDTH / end;
    let height = TOP + LANE_H * rows.len() as f64 + 40.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">",
        LEFT + WIDTH + 20.0
    );
    let _ = writeln!(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"20\" font-size=\"14\">{}</text>",
        escape(title)
    );
    // A legend of the stage colours, top right.
    for (k, stage) in Stage::ALL.into_iter().enumerate() {
        let x = LEFT + WIDTH - 90.0 * (Stage::ALL.len() - k) as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{x:.1}\" y=\"10\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"20\">{stage}</text>",
            colour(stage),
            x + 16.0
        );
    }
    for (row, (_, _, text)) in rows.iter().enumerate() {
        let y = TOP + LANE_H * row as f64;
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{:.1}\">{}</text>",
            y + LANE_H * 0.65,
            escape(text)
        );
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>",
            y + LANE_H,
            LEFT + WIDTH,
            y + LANE_H
        );
    }
    // Time axis with about ten ticks, drawn before the boxes so its grid lies under them.
    let axis_y = TOP + LANE_H * rows.len() as f64 + 15.0;
    let step = nice_step(end / 10.0);
    for k in 0.. {
        let t = k as f64 * step;
        if t > end + 1e-12 {
            break;
        }
        let x = LEFT + t * scale;
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            axis_y - 10.0
        );
        let _ = writeln!(
            svg,
            "<text x=\"{x:.1}\" y=\"{axis_y:.1}\" text-anchor=\"middle\">{}</text>",
            fmt_tick(t, step, end)
        );
    }
    for (p, (_, t)) in parts.iter().enumerate() {
        for s in &t.spans {
            let row = rows
                .iter()
                .position(|(q, lane, _)| *q == p && *lane == s.lane)
                .unwrap_or(0);
            let x = LEFT + s.start_ms * scale;
            let w = (s.ms() * scale).max(0.5);
            let y = TOP + LANE_H * row as f64 + 3.0;
            let colour = colour(s.stage);
            let _ = writeln!(
                svg,
                "<rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{colour}\" stroke=\"white\" stroke-width=\"0.5\"><title>{} batch {}: {:.3} ms</title></rect>",
                LANE_H - 6.0,
                s.stage,
                s.batch,
                s.ms()
            );
            if w > 14.0 {
                let _ = writeln!(
                    svg,
                    "<text x=\"{:.2}\" y=\"{:.1}\" fill=\"white\">{}</text>",
                    x + 2.0,
                    y + LANE_H * 0.55,
                    s.batch
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// The timelines of several devices' pipelines, one per device, started together (each
/// measured from its own start, which the runs share within the time it takes to release
/// the threads): one picture and one trace with every device's lanes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupTimeline {
    /// Each device's label (`cpu device 1`) and timeline, top to bottom.
    pub devices: Vec<(String, Timeline)>,
    /// A title for pictures.
    pub title: String,
}

impl GroupTimeline {
    fn parts(&self) -> Vec<(&str, &Timeline)> {
        self.devices.iter().map(|(l, t)| (l.as_str(), t)).collect()
    }

    /// Chrome trace JSON: one process per device, one thread per lane.
    pub fn to_chrome_trace(&self) -> String {
        chrome_trace(&self.parts(), &self.title)
    }

    /// An SVG picture: every device's lanes on one time axis, labelled with the device.
    pub fn to_svg(&self) -> String {
        svg(&self.parts(), &self.title)
    }

    /// Writes [`GroupTimeline::to_chrome_trace`] to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_chrome_trace())
    }

    /// Writes [`GroupTimeline::to_svg`] to `path`.
    pub fn write_svg(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

/// The colour of a stage in pictures.
fn colour(stage: Stage) -> &'static str {
    match stage {
        Stage::Load => "#9e9e9e",
        Stage::Upload => "#42a5f5",
        Stage::Compute => "#66bb6a",
        Stage::Download => "#ffa726",
        Stage::Deliver => "#ab47bc",
    }
}

/// A round tick step (1, 2 or 5 times a power of ten) near `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let nice = if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * p
}

/// A tick label at `t` ms on an axis of `end` ms with ticks `step` ms apart: one unit for the
/// whole axis (chosen by its length) and as many decimals as the step needs, so that no two
/// ticks read the same (`0`, `0.5 ms`, `1.0 ms`, `1.5 ms`, not `1 ms`, `2 ms`, `2 ms`).
fn fmt_tick(t: f64, step: f64, end: f64) -> String {
    if t == 0.0 {
        return "0".into();
    }
    let (div, unit) = if end >= 1000.0 {
        (1e3, "s")
    } else if end >= 1.0 {
        (1.0, "ms")
    } else {
        (1e-3, "us")
    };
    let decimals = (-((step / div).log10() + 1e-9).floor()).max(0.0) as usize;
    format!("{:.*} {unit}", decimals, t / div)
}

/// Escapes text for JSON strings and XML alike (neither needs more for these labels).
fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' => "&quot;".chars().collect::<Vec<_>>(),
            '<' => "&lt;".chars().collect(),
            '>' => "&gt;".chars().collect(),
            '&' => "&amp;".chars().collect(),
            '\\' => "/".chars().collect(),
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_and_svg_hold_every_span() {
        let t = Timeline {
            lanes: vec![Lane::Loader, Lane::Upload],
            spans: vec![
                Span {
                    lane: Lane::Loader,
                    stage: Stage::Load,
                    batch: 0,
                    start_ms: 0.0,
                    end_ms: 1.0,
                },
                Span {
                    lane: Lane::Upload,
                    stage: Stage::Upload,
                    batch: 0,
                    start_ms: 1.0,
                    end_ms: 2.5,
                },
            ],
            title: "t <x>".into(),
        };
        let json = t.to_chrome_trace();
        assert_eq!(json.matches("\"ph\":\"X\"").count(), 2);
        assert!(json.contains("\"ts\":1000.000,\"dur\":1500.000"));
        assert!(json.contains("upload stream"));
        let svg = t.to_svg();
        // One box (with a tooltip) per span, and the legend's five swatches.
        assert_eq!(svg.matches("<title>").count(), 2);
        assert_eq!(svg.matches("<rect x=").count(), 2 + 5);
        assert!(svg.contains("t &lt;x&gt;"));
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn a_group_timeline_shows_every_devices_lanes() {
        let span = |lane, start_ms| Span {
            lane,
            stage: Stage::Compute,
            batch: 3,
            start_ms,
            end_ms: start_ms + 1.0,
        };
        let device = |start_ms| Timeline {
            lanes: vec![Lane::Loader, Lane::Compute(0)],
            spans: vec![span(Lane::Compute(0), start_ms)],
            title: "triple on cpu".into(),
        };
        let g = GroupTimeline {
            devices: vec![
                ("rank 0".into(), device(0.0)),
                ("rank 1".into(), device(4.0)),
            ],
            title: "two devices".into(),
        };
        let json = g.to_chrome_trace();
        // One process per device, its lanes as its threads, each span in its process.
        assert!(json.contains("\"pid\":1,\"args\":{\"name\":\"rank 0: triple on cpu\"}"));
        assert!(json.contains("\"pid\":2,\"args\":{\"name\":\"rank 1: triple on cpu\"}"));
        assert!(json.contains("\"pid\":2,\"tid\":1,\"ts\":4000.000"));
        assert_eq!(json.matches("\"ph\":\"X\"").count(), 2);
        let svg = g.to_svg();
        for label in [
            "rank 0: loader (host)",
            "rank 0: compute stream 0",
            "rank 1: compute stream 0",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        // Both boxes, on one time axis: rank 1's starts four fifths of the way along.
        assert_eq!(svg.matches("<title>").count(), 2);
        assert!(svg.contains(&format!("<rect x=\"{:.2}\"", 190.0 + 1100.0 * 0.8)));
    }

    #[test]
    fn tick_labels_differ_and_share_a_unit() {
        let labels: Vec<String> = (0..5).map(|k| fmt_tick(k as f64 * 0.5, 0.5, 2.2)).collect();
        assert_eq!(labels, ["0", "0.5 ms", "1.0 ms", "1.5 ms", "2.0 ms"]);
        assert_eq!(fmt_tick(1500.0, 500.0, 2500.0), "1.5 s");
        assert_eq!(fmt_tick(40.0, 20.0, 90.0), "40 ms");
        assert_eq!(fmt_tick(0.2, 0.1, 0.5), "200 us");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(0.23), 0.2);
        assert_eq!(nice_step(4.0), 5.0);
        assert_eq!(nice_step(9.0), 10.0);
    }
}

//! The figures of a bench run, each with its target and verdict, printed as
//! tables for people or as one JSON object.

use std::time::Duration;

use serde_json::{Value, json};

use crate::output::short;

/// What a number measures, for printing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Microseconds (printed as a short duration).
    Micros,
    /// Events per second.
    PerSec,
    /// A plain ratio (`1.07x`).
    Times,
    /// A count or an average count.
    Count,
    /// Bytes.
    Bytes,
    /// Round trips (the PING RTT measured in the same run).
    Rtt,
}

impl Unit {
    /// The unit's name in JSON.
    fn name(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::PerSec => "per_s",
            Unit::Times => "ratio",
            Unit::Count => "count",
            Unit::Bytes => "bytes",
            Unit::Rtt => "rtt",
        }
    }

    /// `v` for people.
    fn show(self, v: f64) -> String {
        if !v.is_finite() {
            return "-".to_owned();
        }
        match self {
            Unit::Micros => short(Duration::from_nanos((v * 1e3).max(0.0) as u64)),
            Unit::PerSec => format!("{v:.0}/s"),
            Unit::Times => format!("{v:.2}x"),
            Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
            // Enough digits that a value just over a bound does not print as the bound.
            Unit::Count if v < 10.0 => format!("{v:.3}"),
            Unit::Count => format!("{v:.2}"),
            Unit::Bytes => format!("{v:.0} B"),
            Unit::Rtt => format!("{v:.2} RTT"),
        }
    }
}

/// A measured number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Figure {
    /// The value (NaN when nothing was measured).
    pub(crate) value: f64,
    /// What it measures.
    pub(crate) unit: Unit,
}

impl Figure {
    /// `value` in `unit`.
    pub(crate) fn new(value: f64, unit: Unit) -> Figure {
        Figure { value, unit }
    }

    /// A duration in microseconds; NaN for `None`.
    pub(crate) fn micros(d: Option<Duration>) -> Figure {
        Figure::new(d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e6), Unit::Micros)
    }
}

/// A target: the value must stay at most, or reach at least, a bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Goal {
    /// value <= bound.
    AtMost(f64, String),
    /// value >= bound.
    AtLeast(f64, String),
}

impl Goal {
    /// At most `bound`, shown as `label` (in the figure's unit).
    pub(crate) fn at_most(bound: f64, unit: Unit) -> Goal {
        Goal::AtMost(bound, format!("<= {}", unit.show(bound)))
    }

    /// At least `bound`, shown as `label` (in the figure's unit).
    pub(crate) fn at_least(bound: f64, unit: Unit) -> Goal {
        Goal::AtLeast(bound, format!(">= {}", unit.show(bound)))
    }

    /// The target for people.
    fn label(&self) -> &str {
        match self {
            Goal::AtMost(_, l) | Goal::AtLeast(_, l) => l,
        }
    }

    /// Whether `v` meets the target; `None` when there is no value.
    fn met(&self, v: f64) -> Option<bool> {
        if !v.is_finite() {
            return None;
        }
        Some(match self {
            Goal::AtMost(b, _) => v <= *b,
            Goal::AtLeast(b, _) => v >= *b,
        })
    }
}

/// One line of a scenario's table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What is measured.
    pub(crate) figure: String,
    /// leasehold's value.
    pub(crate) value: Figure,
    /// The target, if this figure has one.
    pub(crate) goal: Option<Goal>,
    /// The same figure for the section's peer (raw loop or rslock), if any.
    pub(crate) peer: Option<Figure>,
    /// For a floor of DESIGN.md section 8: the guarantee its cost pays for,
    /// in one line.
    pub(crate) reason: Option<&'static str>,
    /// False when the run's machine was too noisy to judge figures
    /// ([`super::calibration`]): its target is shown, its verdict is not.
    pub(crate) judged: bool,
}

impl Row {
    /// A figure without a target.
    pub(crate) fn plain(figure: impl Into<String>, value: Figure) -> Row {
        Row {
            figure: figure.into(),
            value,
            goal: None,
            peer: None,
            reason: None,
            judged: true,
        }
    }

    /// A figure with a target.
    pub(crate) fn goal(figure: impl Into<String>, value: Figure, goal: Goal) -> Row {
        Row {
            goal: Some(goal),
            ..Row::plain(figure, value)
        }
    }

    /// The peer's value beside it.
    pub(crate) fn beside(mut self, peer: Figure) -> Row {
        self.peer = Some(peer);
        self
    }

    /// Marks the target as a floor of DESIGN.md section 8, kept for `reason`
    /// (the guarantee it pays for); printed under the table.
    pub(crate) fn because(mut self, reason: &'static str) -> Row {
        self.reason = Some(reason);
        self
    }

    /// `PASS`, `SHORT`, `n/a` (no value), [`NOT_JUDGED`] (a target on a noisy
    /// machine) or `""` (no target).
    fn verdict(&self) -> &'static str {
        if !self.judged && self.goal.is_some() {
            return NOT_JUDGED;
        }
        match self.goal.as_ref().map(|g| g.met(self.value.value)) {
            None => "",
            Some(None) => "n/a",
            Some(Some(true)) => "PASS",
            Some(Some(false)) => "SHORT",
        }
    }
}

/// The verdict of a figure with a target when the machine was too noisy.
pub(crate) const NOT_JUDGED: &str = "not judged";

/// One scenario's results.
#[derive(Debug, Clone)]
pub(crate) struct Section {
    /// Its key in JSON (`uncontended`, `contended`, ...).
    pub(crate) key: &'static str,
    /// Its heading.
    pub(crate) title: String,
    /// The peer column's heading, when rows carry one.
    pub(crate) peer: Option<&'static str>,
    /// The table.
    pub(crate) rows: Vec<Row>,
    /// Lines printed under the table: what was compared with what.
    pub(crate) notes: Vec<String>,
    /// Everything measured, for JSON.
    pub(crate) data: Value,
}

/// How many figures met and missed their targets.
pub(crate) fn tally(sections: &[Section]) -> (usize, usize) {
    let verdicts = sections
        .iter()
        .flat_map(|s| s.rows.iter().map(Row::verdict));
    verdicts.fold((0, 0), |(pass, short), v| match v {
        "PASS" => (pass + 1, short),
        "SHORT" | "n/a" => (pass, short + 1),
        _ => (pass, short),
    })
}

impl Section {
    /// Shows every target but judges none (a noisy machine).
    pub(crate) fn unjudged(mut self) -> Section {
        for row in &mut self.rows {
            row.judged = false;
        }
        self
    }

    /// The section as an aligned table under its title, notes below.
    pub(crate) fn to_human(&self) -> String {
        let mut header = vec!["figure", "leasehold", "target", "verdict"];
        if let Some(peer) = self.peer {
            header.push(peer);
        }
        let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
        for row in &self.rows {
            let mut line = vec![
                row.figure.clone(),
                row.value.unit.show(row.value.value),
                row.goal
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |g| g.label().to_owned()),
                match row.verdict() {
                    "" => "-".to_owned(),
                    v => v.to_owned(),
                },
            ];
            if self.peer.is_some() {
                line.push(
                    row.peer
                        .map_or_else(|| "-".to_owned(), |p| p.unit.show(p.value)),
                );
            }
            cells.push(line);
        }
        let columns = cells[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                cells
                    .iter()
                    .map(|l| l[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = format!("== {} ==", self.title);
        for line in &cells {
            out.push('\n');
            let padded: Vec<String> = line
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if i == 0 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            out.push_str(padded.join("  ").trim_end());
        }
        let floors: Vec<&Row> = self.rows.iter().filter(|r| r.reason.is_some()).collect();
        if !floors.is_empty() {
            out.push_str("\n  floors to keep (DESIGN.md section 8), each for what it pays:");
        }
        for row in floors {
            out.push_str(&format!(
                "\n    {} {}: {}",
                row.verdict(),
                row.figure,
                row.reason.unwrap_or_default()
            ));
        }
        for note in &self.notes {
            out.push_str("\n  ");
            out.push_str(note);
        }
        out
    }

    /// The section as JSON: rows with targets and verdicts, and the raw data.
    pub(crate) fn to_json(&self) -> Value {
        let num = |f: f64| if f.is_finite() { json!(f) } else { Value::Null };
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "figure": r.figure,
                    "value": num(r.value.value),
                    "unit": r.value.unit.name(),
                    "target": r.goal.as_ref().map(|g| match g {
                        Goal::AtMost(b, l) => json!({"at_most": num(*b), "label": l}),
                        Goal::AtLeast(b, l) => json!({"at_least": num(*b), "label": l}),
                    }),
                    "verdict": match r.verdict() { "" => Value::Null, v => json!(v) },
                    "peer": r.peer.map(|p| num(p.value)),
                    "floor_reason": r.reason,
                })
            })
            .collect();
        json!({
            "title": self.title,
            "peer": self.peer,
            "rows": rows,
            "notes": self.notes,
            "data": self.data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DESIGN.md section 8's floors are printed under the table, each with
    /// its verdict and the guarantee it pays for, and carried in the JSON.
    #[test]
    fn floors_are_printed_with_what_they_pay_for() {
        let section = Section {
            key: "x",
            title: "x".into(),
            peer: None,
            rows: vec![
                Row::goal(
                    "commands",
                    Figure::new(9.0, Unit::Count),
                    Goal::at_most(9.0, Unit::Count),
                )
                .because("fences that survive failovers"),
                Row::goal(
                    "not a floor",
                    Figure::new(2.0, Unit::Count),
                    Goal::at_most(1.0, Unit::Count),
                ),
            ],
            notes: vec![],
            data: Value::Null,
        };
        let human = section.to_human();
        assert!(
            human.contains("floors to keep (DESIGN.md section 8)")
                && human.contains("PASS commands: fences that survive failovers"),
            "{human}"
        );
        assert!(!human.contains("SHORT not a floor:"), "{human}");
        let json = section.to_json();
        assert_eq!(
            json["rows"][0]["floor_reason"],
            "fences that survive failovers"
        );
        assert!(json["rows"][1]["floor_reason"].is_null());
    }

    #[test]
    fn verdicts_follow_the_goal_and_missing_values_are_not_a_pass() {
        let f = |v| Figure::new(v, Unit::Count);
        let row = |v, g| Row::goal("x", f(v), g);
        assert_eq!(row(3.0, Goal::at_most(4.0, Unit::Count)).verdict(), "PASS");
        assert_eq!(row(5.0, Goal::at_most(4.0, Unit::Count)).verdict(), "SHORT");
        assert_eq!(row(0.7, Goal::at_least(0.7, Unit::Count)).verdict(), "PASS");
        assert_eq!(
            row(f64::NAN, Goal::at_least(1.0, Unit::Count)).verdict(),
            "n/a"
        );
        assert_eq!(Row::plain("y", f(1.0)).verdict(), "");
        let section = Section {
            key: "k",
            title: "t".into(),
            peer: Some("raw"),
            rows: vec![
                row(1.0, Goal::at_most(2.0, Unit::Count)).beside(f(2.0)),
                row(3.0, Goal::at_most(2.0, Unit::Count)),
            ],
            notes: vec![],
            data: Value::Null,
        };
        assert_eq!(tally(std::slice::from_ref(&section)), (1, 1));
        let text = section.to_human();
        assert!(text.contains("PASS") && text.contains("SHORT"), "{text}");
        assert_eq!(section.to_json()["rows"][1]["verdict"], "SHORT");
    }
}

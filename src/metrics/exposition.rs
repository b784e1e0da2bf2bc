//! The one writer of Prometheus text (exposition format 0.0.4) and the registry every module
//! registers its metrics into.
//!
//! Why our own writer rather than the `prometheus-client` or `metrics` crate: Sluice's
//! counters are plain atomics on the hot paths and most gauges are computed from state when
//! scraped (the image, the replicas, the groups), which those crates would serve through
//! custom collectors anyway; what they add beyond that is the text encoding, which is this
//! file: families written once each (HELP and TYPE, samples together), label values escaped,
//! numbers formatted as Prometheus parses them. No dependency, no second copy of every value.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value, formatted as Prometheus parses it.
pub trait SampleValue {
    fn write_to(&self, out: &mut String);
}

macro_rules! integer_sample {
    ($($t:ty),*) => {$(
        impl SampleValue for $t {
            fn write_to(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
integer_sample!(u8, u32, u64, usize, i32, i64);

impl SampleValue for f64 {
    fn write_to(&self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// Prometheus text being written: each family once, label values escaped.
#[derive(Default)]
pub struct Exposition {
    text: String,
    families: HashSet<String>,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the family `name`: its HELP and TYPE lines. A family started twice (two
    /// modules choosing one name) is a bug: debug builds panic, release builds write the
    /// samples under the first family's header anyway, which Prometheus refuses loudly.
    pub fn family<'a>(&'a mut self, name: &'a str, kind: Kind, help: &str) -> Family<'a> {
        debug_assert!(valid_name(name), "metric name {name:?}");
        let first = self.families.insert(name.to_owned());
        debug_assert!(first, "metric family {name} written twice");
        let _ = write!(self.text, "# HELP {name} ");
        escape_into(&mut self.text, help, false);
        let _ = writeln!(self.text, "\n# TYPE {name} {}", kind.name());
        Family { out: self, name }
    }

    /// Shorthand for a family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl SampleValue) {
        self.family(name, kind, help).value(value);
    }

    /// Whether the family `name` was written.
    pub fn has_family(&self, name: &str) -> bool {
        self.families.contains(name)
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// The samples of one family.
pub struct Family<'a> {
    out: &'a mut Exposition,
    name: &'a str,
}

impl Family<'_> {
    /// The family's one unlabelled sample.
    pub fn value(&mut self, value: impl SampleValue) -> &mut Self {
        self.sample(&[], value)
    }

    /// A sample with these labels (names are identifiers; values are escaped).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl SampleValue) -> &mut Self {
        self.line("", labels, None, &value)
    }

    /// A histogram's samples: `buckets` are (upper bound, cumulative count) without +Inf;
    /// `count` is the +Inf bucket and the count.
    pub fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) -> &mut Self {
        let mut bound = String::new();
        for (le, cumulative) in buckets {
            bound.clear();
            le.write_to(&mut bound);
            self.line("_bucket", labels, Some(&bound), cumulative);
        }
        self.line("_bucket", labels, Some("+Inf"), &count);
        self.line("_sum", labels, None, &sum);
        self.line("_count", labels, None, &count)
    }

    fn line(
        &mut self,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<&str>,
        value: &dyn SampleValue,
    ) -> &mut Self {
        let text = &mut self.out.text;
        text.push_str(self.name);
        text.push_str(suffix);
        if !labels.is_empty() || le.is_some() {
            text.push('{');
            let le = le.map(|le| ("le", le));
            for (i, (name, value)) in labels.iter().copied().chain(le).enumerate() {
                debug_assert!(valid_name(name), "label name {name:?}");
                if i > 0 {
                    text.push(',');
                }
                text.push_str(name);
                text.push_str("=\"");
                escape_into(text, value, true);
                text.push('"');
            }
            text.push('}');
        }
        text.push(' ');
        value.write_to(text);
        text.push('\n');
        self
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Escapes backslash and newline (HELP text), and the double quote too in label values.
fn escape_into(out: &mut String, value: &str, quote: bool) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// Something that writes metric families when `/metrics` is scraped.
pub trait Collect: Send + Sync {
    fn collect(&self, out: &mut Exposition);
}

impl<F: Fn(&mut Exposition) + Send + Sync> Collect for F {
    fn collect(&self, out: &mut Exposition) {
        self(out)
    }
}

/// Every module's metrics, rendered in registration order on each scrape.
#[derive(Default)]
pub struct Registry {
    collectors: RwLock<Vec<Arc<dyn Collect>>>,
}

impl Registry {
    pub fn register(&self, collector: Arc<dyn Collect>) {
        self.collectors
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(collector);
    }

    pub fn render(&self) -> String {
        let collectors = self
            .collectors
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out = Exposition::new();
        for collector in collectors {
            collector.collect(&mut out);
        }
        out.into_text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_once_with_escaped_labels_and_help() {
        let mut out = Exposition::new();
        out.family(
            "sluice_groups",
            Kind::Gauge,
            "Groups, by \"state\"\\type\nsecond line",
        )
        .sample(&[("group", "a\"b\\c\nd")], 3u64)
        .sample(&[("group", "plain"), ("state", "Stable")], 1u64);
        out.single("sluice_up", Kind::Gauge, "Up.", 1u8);
        out.family("sluice_ratio", Kind::Gauge, "Ratios.")
            .sample(&[("v", "nan")], f64::NAN)
            .sample(&[("v", "inf")], f64::INFINITY)
            .sample(&[("v", "small")], 0.000_25);
        assert_eq!(
            out.into_text(),
            "# HELP sluice_groups Groups, by \"state\"\\\\type\\nsecond line\n\
             # TYPE sluice_groups gauge\n\
             sluice_groups{group=\"a\\\"b\\\\c\\nd\"} 3\n\
             sluice_groups{group=\"plain\",state=\"Stable\"} 1\n\
             # HELP sluice_up Up.\n# TYPE sluice_up gauge\nsluice_up 1\n\
             # HELP sluice_ratio Ratios.\n# TYPE sluice_ratio gauge\n\
             sluice_ratio{v=\"nan\"} NaN\nsluice_ratio{v=\"inf\"} +Inf\nsluice_ratio{v=\"small\"} 0.00025\n"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_then_inf_sum_and_count() {
        let mut out = Exposition::new();
        out.family("lat_seconds", Kind::Histogram, "Latency.")
            .histogram(&[("api", "Produce")], &[(0.001, 2), (0.5, 5)], 1.25, 6);
        assert_eq!(
            out.into_text(),
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
             lat_seconds_bucket{api=\"Produce\",le=\"0.001\"} 2\n\
             lat_seconds_bucket{api=\"Produce\",le=\"0.5\"} 5\n\
             lat_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 6\n\
             lat_seconds_sum{api=\"Produce\"} 1.25\nlat_seconds_count{api=\"Produce\"} 6\n"
        );
    }

    #[test]
    #[should_panic(expected = "written twice")]
    #[cfg(debug_assertions)]
    fn a_family_written_twice_is_a_bug() {
        let mut out = Exposition::new();
        out.single("x", Kind::Gauge, "X.", 1u8);
        out.single("x", Kind::Gauge, "X.", 2u8);
    }

    #[test]
    fn the_registry_renders_collectors_in_registration_order() {
        let registry = Registry::default();
        registry.register(Arc::new(|out: &mut Exposition| {
            out.single("first", Kind::Counter, "F.", 1u64)
        }));
        registry.register(Arc::new(|out: &mut Exposition| {
            out.single("second", Kind::Gauge, "S.", -2i64)
        }));
        let text = registry.render();
        assert!(text.find("first 1").unwrap() < text.find("second -2").unwrap());
    }
}

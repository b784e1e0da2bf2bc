//! The connector plugins built into `sluice connect`: Kafka's FileStreamSource and
//! FileStreamSink (by their class names or short names), and Sluice's TopicSink (writes each
//! record to another topic; it exercises sink offsets without a file). Each plugin declares its
//! settings once; validation (`PUT /connector-plugins/.../config/validate`), the REST answers
//! and the tasks read that one list.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::ConnectError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Source,
    Sink,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Source => "source",
            Kind::Sink => "sink",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    FileSource,
    FileSink,
    TopicSink,
}

/// A setting a connector reads.
pub struct Setting {
    pub name: &'static str,
    pub kind: &'static str,
    pub required: bool,
    pub default: Option<&'static str>,
    pub importance: &'static str,
    pub doc: &'static str,
}

const COMMON: &[Setting] = &[
    Setting {
        name: "name",
        kind: "STRING",
        required: true,
        default: None,
        importance: "HIGH",
        doc: "Globally unique name to use for this connector.",
    },
    Setting {
        name: "connector.class",
        kind: "STRING",
        required: true,
        default: None,
        importance: "HIGH",
        doc: "Name or alias of the class for this connector.",
    },
    Setting {
        name: "tasks.max",
        kind: "INT",
        required: false,
        default: Some("1"),
        importance: "HIGH",
        doc: "Maximum number of tasks to use for this connector.",
    },
    Setting {
        name: "key.converter",
        kind: "CLASS",
        required: false,
        default: None,
        importance: "LOW",
        doc: "Converter class for keys; the worker's when unset.",
    },
    Setting {
        name: "value.converter",
        kind: "CLASS",
        required: false,
        default: None,
        importance: "LOW",
        doc: "Converter class for values; the worker's when unset.",
    },
    Setting {
        name: "errors.tolerance",
        kind: "STRING",
        required: false,
        default: Some("none"),
        importance: "MEDIUM",
        doc: "none: a record that cannot be converted or written fails the task; all: it is \
              skipped and logged.",
    },
];

const FILE_SOURCE: &[Setting] = &[
    Setting {
        name: "file",
        kind: "STRING",
        required: true,
        default: None,
        importance: "HIGH",
        doc: "Source filename. Sluice reads a file: standard input is not a worker's to read.",
    },
    Setting {
        name: "topic",
        kind: "STRING",
        required: true,
        default: None,
        importance: "HIGH",
        doc: "The topic to publish data to.",
    },
    Setting {
        name: "batch.size",
        kind: "INT",
        required: false,
        default: Some("2000"),
        importance: "LOW",
        doc: "The maximum number of records the source task can read from the file each time \
              it is polled.",
    },
];

const FILE_SINK: &[Setting] = &[Setting {
    name: "file",
    kind: "STRING",
    required: true,
    default: None,
    importance: "HIGH",
    doc: "Destination filename. Sluice writes a file: standard output is not a worker's.",
}];

const TOPIC_SINK: &[Setting] = &[Setting {
    name: "target.topic",
    kind: "STRING",
    required: true,
    default: None,
    importance: "HIGH",
    doc: "The topic each record is written to, with its key, value, headers and timestamp.",
}];

const SINK_COMMON: &[Setting] = &[
    Setting {
        name: "topics",
        kind: "LIST",
        required: false,
        default: Some(""),
        importance: "HIGH",
        doc: "List of topics to consume, separated by commas.",
    },
    Setting {
        name: "topics.regex",
        kind: "STRING",
        required: false,
        default: Some(""),
        importance: "HIGH",
        doc: "Regular expression giving topics to consume.",
    },
];

/// Connector settings Sluice does not implement: refused rather than ignored.
const REFUSED: &[(&str, &str)] = &[
    (
        "transforms",
        "single message transforms are not implemented by sluice connect",
    ),
    (
        "predicates",
        "predicates are not implemented by sluice connect",
    ),
    (
        "errors.deadletterqueue.topic.name",
        "dead letter queues are not implemented by sluice connect",
    ),
    (
        "header.converter",
        "sluice connect keeps headers as bytes; header converters are not implemented",
    ),
    (
        "offsets.storage.topic",
        "a connector's own offsets topic is not implemented by sluice connect: its offsets \
         are in the worker's offset.storage.topic",
    ),
];

/// Exactly-once source settings (KIP-618), and what is wrong with them. A sink has none;
/// FileStreamSource supports exactly-once and defines no transaction boundaries of its own.
fn exactly_once_problems(
    plugin: Plugin,
    config: &BTreeMap<String, String>,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let get = |key: &str| config.get(key).map(|v| v.trim());
    if plugin != Plugin::FileSource {
        for key in [
            "exactly.once.support",
            "transaction.boundary",
            "transaction.boundary.interval.ms",
        ] {
            if config.contains_key(key) {
                problems.push((
                    key,
                    format!(
                        "{key} is a source connector's setting; {} is a sink",
                        plugin.class()
                    ),
                ));
            }
        }
        return problems;
    }
    if let Some(value) = get("exactly.once.support")
        && !matches!(value, "requested" | "required")
    {
        problems.push((
            "exactly.once.support",
            format!("Invalid value {value} for configuration exactly.once.support: String must be one of: requested, required"),
        ));
    }
    match get("transaction.boundary") {
        None | Some("poll" | "interval") => {}
        Some("connector") => problems.push((
            "transaction.boundary",
            "The connector does not support connector-defined transaction boundaries with the given configuration: FileStreamSource defines none (use poll or interval)".to_owned(),
        )),
        Some(value) => problems.push((
            "transaction.boundary",
            format!("Invalid value {value} for configuration transaction.boundary: String must be one of: poll, interval, connector"),
        )),
    }
    if let Some(value) = get("transaction.boundary.interval.ms")
        && value.parse::<u32>().is_err()
    {
        problems.push((
            "transaction.boundary.interval.ms",
            format!("Invalid value {value} for configuration transaction.boundary.interval.ms: expected a whole number of milliseconds"),
        ));
    }
    problems
}

impl Plugin {
    pub const ALL: [Plugin; 3] = [Plugin::FileSink, Plugin::FileSource, Plugin::TopicSink];

    /// The plugin a `connector.class` names: the full class name, the simple name, or the
    /// simple name without `Connector`, as Kafka's plugin aliases allow.
    pub fn by_class(class: &str) -> Option<Plugin> {
        let class = class.trim();
        Plugin::ALL.into_iter().find(|plugin| {
            let full = plugin.class();
            let simple = full.rsplit('.').next().unwrap_or(full);
            class == full || class == simple || Some(class) == simple.strip_suffix("Connector")
        })
    }

    pub fn class(self) -> &'static str {
        match self {
            Plugin::FileSource => "org.apache.kafka.connect.file.FileStreamSourceConnector",
            Plugin::FileSink => "org.apache.kafka.connect.file.FileStreamSinkConnector",
            Plugin::TopicSink => "io.sluice.connect.TopicSinkConnector",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Plugin::FileSource => Kind::Source,
            Plugin::FileSink | Plugin::TopicSink => Kind::Sink,
        }
    }

    pub fn version(self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }

    fn own_settings(self) -> &'static [Setting] {
        match self {
            Plugin::FileSource => FILE_SOURCE,
            Plugin::FileSink => FILE_SINK,
            Plugin::TopicSink => TOPIC_SINK,
        }
    }

    /// Every setting: the common ones, a sink's topic selection, then the plugin's own.
    pub fn settings(self) -> impl Iterator<Item = &'static Setting> {
        let sink: &[Setting] = if self.kind() == Kind::Sink {
            SINK_COMMON
        } else {
            &[]
        };
        COMMON.iter().chain(sink).chain(self.own_settings())
    }

    /// Each setting's errors (Connect's validation answer keeps them per setting).
    pub fn validate(
        self,
        config: &BTreeMap<String, String>,
    ) -> BTreeMap<&'static str, Vec<String>> {
        let mut errors: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for setting in self.settings() {
            let value = config.get(setting.name).map(|v| v.trim());
            let entry = errors.entry(setting.name).or_default();
            match value {
                None | Some("") if setting.required => {
                    entry.push(format!(
                        "Missing required configuration \"{}\" which has no default value.",
                        setting.name
                    ));
                }
                Some(value) if setting.kind == "INT" && !value.is_empty() => {
                    match value.parse::<i64>() {
                        Ok(n) if n >= 1 && n <= i32::MAX as i64 => {}
                        Ok(_) => entry.push(format!(
                            "Invalid value {value} for configuration {}: Value must be at least 1",
                            setting.name
                        )),
                        Err(_) => entry.push(format!(
                            "Invalid value {value} for configuration {}: Not a number of type INT",
                            setting.name
                        )),
                    }
                }
                _ => {}
            }
        }
        if let Some(tolerance) = config.get("errors.tolerance")
            && !matches!(tolerance.trim(), "none" | "all")
        {
            errors.entry("errors.tolerance").or_default().push(format!(
                "Invalid value {tolerance} for configuration errors.tolerance: String must be one of: none, all"
            ));
        }
        if self.kind() == Kind::Sink {
            let topics = config.get("topics").map_or("", |v| v.trim());
            let regex = config.get("topics.regex").map_or("", |v| v.trim());
            let problem = match (topics.is_empty(), regex.is_empty()) {
                (true, true) => Some("Must configure one of topics or topics.regex".to_owned()),
                (false, false) => Some(
                    "topics and topics.regex are mutually exclusive options, but both are set."
                        .to_owned(),
                ),
                _ => None,
            };
            if let Some(problem) = problem {
                errors.entry("topics").or_default().push(problem.clone());
                errors.entry("topics.regex").or_default().push(problem);
            }
            if !regex.is_empty()
                && let Err(error) = regex::Regex::new(regex)
            {
                errors
                    .entry("topics.regex")
                    .or_default()
                    .push(format!("Invalid regex: {error}"));
            }
        }
        if self == Plugin::FileSource
            && let Some(topic) = config.get("topic")
            && topic.contains(',')
        {
            errors.entry("topic").or_default().push(
                "'topic' in FileStreamSourceConnector configuration requires definition of a single topic."
                    .to_owned(),
            );
        }
        for (key, problem) in exactly_once_problems(self, config) {
            errors.entry(key).or_default().push(problem);
        }
        for (key, reason) in REFUSED {
            if config
                .keys()
                .any(|k| k == key || k.starts_with(&format!("{key}.")))
            {
                errors
                    .entry(key)
                    .or_default()
                    .push(format!("{key}: {reason}"));
            }
        }
        errors.retain(|_, list| !list.is_empty());
        errors
    }

    /// The validation answer Connect gives (`ConfigInfos`).
    pub fn validation_report(self, config: &BTreeMap<String, String>) -> Value {
        let errors = self.validate(config);
        let mut configs: Vec<Value> = self
            .settings()
            .enumerate()
            .map(|(order, setting)| {
                json!({
                    "definition": {
                        "name": setting.name,
                        "type": setting.kind,
                        "required": setting.required,
                        "default_value": setting.default,
                        "importance": setting.importance,
                        "documentation": setting.doc,
                        "group": null,
                        "width": "NONE",
                        "display_name": setting.name,
                        "dependents": [],
                        "order": order,
                    },
                    "value": {
                        "name": setting.name,
                        "value": config.get(setting.name).cloned().or(setting.default.map(str::to_owned)),
                        "recommended_values": [],
                        "errors": errors.get(setting.name).cloned().unwrap_or_default(),
                        "visible": true,
                    }
                })
            })
            .collect();
        for (key, list) in &errors {
            if self.settings().all(|setting| setting.name != *key) {
                configs.push(json!({
                    "definition": null,
                    "value": {"name": key, "value": config.get(*key), "recommended_values": [], "errors": list, "visible": true}
                }));
            }
        }
        json!({
            "name": self.class(),
            "error_count": errors.values().map(Vec::len).sum::<usize>(),
            "groups": ["Common"],
            "configs": configs,
        })
    }

    /// The tasks' configurations (`Connector.taskConfigs`): a file source reads one file, so
    /// it has one task whatever `tasks.max` says; sinks share the topics' partitions.
    pub fn task_configs(self, config: &BTreeMap<String, String>) -> Vec<BTreeMap<String, String>> {
        let tasks_max = config
            .get("tasks.max")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .clamp(1, 1024);
        let count = match self {
            Plugin::FileSource => 1,
            Plugin::FileSink | Plugin::TopicSink => tasks_max,
        };
        let mut task = config.clone();
        task.insert(
            "task.class".to_owned(),
            self.class().replace("Connector", "Task"),
        );
        vec![task; count]
    }
}

/// A connector's config checked as a whole: the plugin it names and no setting errors.
pub fn check(config: &BTreeMap<String, String>) -> Result<Plugin, ConnectError> {
    let Some(class) = config.get("connector.class") else {
        return Err(ConnectError::BadRequest(
            "Connector config is missing connector.class".to_owned(),
        ));
    };
    let Some(plugin) = Plugin::by_class(class) else {
        let known: Vec<&str> = Plugin::ALL.iter().map(|plugin| plugin.class()).collect();
        return Err(ConnectError::BadRequest(format!(
            "Failed to find any class that implements Connector and which name matches {class}, \
             available connectors are: {}",
            known.join(", ")
        )));
    };
    let errors = plugin.validate(config);
    if !errors.is_empty() {
        let count: usize = errors.values().map(Vec::len).sum();
        let list: Vec<String> = errors.values().flatten().cloned().collect();
        return Err(ConnectError::BadRequest(format!(
            "Connector configuration is invalid and contains the following {count} error(s):\n{}\n\
             You can also find the above list of errors at the endpoint `/connector-plugins/{{connectorType}}/config/validate`",
            list.join("\n")
        )));
    }
    Ok(plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn classes_are_found_by_full_and_short_names() {
        for name in [
            "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "FileStreamSourceConnector",
            "FileStreamSource",
        ] {
            assert_eq!(Plugin::by_class(name), Some(Plugin::FileSource), "{name}");
        }
        assert_eq!(Plugin::by_class("FileStreamSink"), Some(Plugin::FileSink));
        assert_eq!(Plugin::by_class("JdbcSourceConnector"), None);
    }

    #[test]
    fn validation_names_each_problem() {
        let ok = config(&[
            ("name", "s"),
            ("connector.class", "FileStreamSink"),
            ("file", "/tmp/out"),
            ("topics", "t"),
        ]);
        assert_eq!(check(&ok).expect("valid"), Plugin::FileSink);
        let mut both = ok.clone();
        both.insert("topics.regex".into(), "t.*".into());
        let errors = Plugin::FileSink.validate(&both);
        assert!(
            errors["topics"][0].contains("mutually exclusive"),
            "{errors:?}"
        );
        let mut transforms = ok.clone();
        transforms.insert("transforms".into(), "x".into());
        let error = check(&transforms).expect_err("refused");
        assert!(error.to_string().contains("transforms"), "{error}");
        let source = config(&[
            ("name", "s"),
            ("connector.class", "FileStreamSource"),
            ("tasks.max", "0"),
        ]);
        let errors = Plugin::FileSource.validate(&source);
        assert_eq!(errors.len(), 3, "{errors:?}");
        let report = Plugin::FileSource.validation_report(&source);
        assert_eq!(report["error_count"], 3);
        assert_eq!(
            Plugin::FileSource
                .task_configs(&config(&[("tasks.max", "4")]))
                .len(),
            1
        );
        assert_eq!(
            Plugin::FileSink
                .task_configs(&config(&[("tasks.max", "4")]))
                .len(),
            4
        );
    }
}

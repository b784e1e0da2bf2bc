//! Kafka's command-line habits, taken as they are typed. Kafka's tools name the action as a
//! flag (`kafka-topics.sh --create --topic t`); Sluice names it as a subcommand (`sluice topics
//! create t`). [`rewrite`] turns the first into the second before the parser sees it, so both
//! work; the rest of Kafka's spellings (`--topic`, `--group`, `--broker-list`, ...) are
//! declared on the commands themselves, where `--help` shows them.
//!
//! [`explain`] replaces the parser's hint for a flag it does not know: clap suggests passing it
//! as a value (`-- --topic`), which is never what a Kafka user meant, or a flag that merely
//! looks alike. It names the closest flag the command has instead.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Per command, Kafka's action flags and the subcommand each stands for.
const ACTION_FLAGS: &[(&str, &[(&str, &str)])] = &[
    (
        "topics",
        &[
            ("--create", "create"),
            ("--list", "list"),
            ("--describe", "describe"),
            ("--alter", "alter"),
            ("--delete", "delete"),
        ],
    ),
    (
        "groups",
        &[
            ("--list", "list"),
            ("--describe", "describe"),
            ("--delete", "delete"),
            ("--reset-offsets", "reset-offsets"),
        ],
    ),
    (
        "configs",
        &[("--describe", "describe"), ("--alter", "alter")],
    ),
    (
        "acls",
        &[("--add", "add"), ("--list", "list"), ("--remove", "remove")],
    ),
    // kafka-log-dirs.sh
    ("log-dirs", &[("--describe", "describe")]),
];

/// Kafka flags with no Sluice counterpart of a similar spelling, and what to use instead.
const KAFKA_FLAGS: &[(&str, &str)] = &[
    (
        "--zookeeper",
        "--bootstrap-server (Sluice has no ZooKeeper; any broker's Kafka port serves)",
    ),
    ("--messages", "--max-messages"),
    ("--bootstrap-servers", "--bootstrap-server"),
    ("--consumer-props", "--consumer-property"),
    ("--producer-props", "--producer-property"),
];

/// The arguments with a Kafka-style action flag moved into the subcommand's place:
/// `sluice topics --create --topic t` becomes `sluice topics create --topic t`. Arguments
/// that already name a subcommand are left alone.
pub fn rewrite(args: Vec<OsString>) -> Vec<OsString> {
    let Some(command) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    let Some((_, actions)) = ACTION_FLAGS.iter().find(|(name, _)| *name == command) else {
        return args;
    };
    // A subcommand given (or help asked for) first: nothing to move.
    match args.get(2).and_then(|a| a.to_str()) {
        Some(first) if first.starts_with("--") && first != "--help" => {}
        _ => return args,
    }
    let found = args.iter().enumerate().skip(2).find_map(|(index, arg)| {
        let arg = arg.to_str()?;
        actions
            .iter()
            .find(|(flag, _)| *flag == arg)
            .map(|(_, subcommand)| (index, *subcommand))
    });
    let Some((index, subcommand)) = found else {
        return args;
    };
    let mut rewritten = args;
    rewritten.remove(index);
    rewritten.insert(2, OsString::from(subcommand));
    rewritten
}

/// The subcommand's name moved before flags typed ahead of it: `sluice groups
/// --bootstrap-server b:1 describe g` becomes `sluice groups describe --bootstrap-server b:1
/// g` (the flags are the subcommand's own). Flags that take a value are stepped over with it.
pub fn subcommand_first(args: Vec<OsString>, root: &clap::Command) -> Vec<OsString> {
    let Some(command) = args
        .get(1)
        .and_then(|a| a.to_str())
        .and_then(|name| root.find_subcommand(name))
    else {
        return args;
    };
    if !command.has_subcommands() {
        return args;
    }
    match args.get(2).and_then(|a| a.to_str()) {
        Some(first) if first.starts_with("--") && first != "--help" => {}
        _ => return args,
    }
    let mut index = 2;
    while let Some(arg) = args.get(index).and_then(|a| a.to_str()) {
        if let Some(flag) = arg.strip_prefix("--") {
            let takes_value = !flag.contains('=')
                && command
                    .get_subcommands()
                    .flat_map(|sub| sub.get_arguments())
                    .any(|a| a.get_long() == Some(flag) && a.get_action().takes_values());
            index += if takes_value { 2 } else { 1 };
            continue;
        }
        if command.find_subcommand(arg).is_none() {
            return args;
        }
        let mut rewritten = args;
        let name = rewritten.remove(index);
        rewritten.insert(2, name);
        return rewritten;
    }
    args
}

/// The parser's error, with a flag it did not know explained by the closest real one.
/// Errors of other kinds (and help, version) come back as they were.
pub fn explain(error: clap::Error, root: &clap::Command, args: &[OsString]) -> ExplainedError {
    if error.kind() != ErrorKind::UnknownArgument {
        return ExplainedError::Clap(error);
    }
    let Some(ContextValue::String(unknown)) = error.get(ContextKind::InvalidArg).cloned() else {
        return ExplainedError::Clap(error);
    };
    let (path, command) = command_of(root, args);
    let flag = unknown.split('=').next().unwrap_or(&unknown).to_owned();
    let hint = if let Some((_, instead)) = KAFKA_FLAGS.iter().find(|(kafka, _)| *kafka == flag) {
        format!("use {instead}")
    } else if let Some(hint) = action_hint(&path, command, args) {
        hint
    } else if !flag.starts_with('-') {
        format!("'{path}' takes no more values here; '{path} --help' lists what it takes")
    } else {
        match closest_flag(&flag, &long_flags(command)) {
            Some(closest) => format!(
                "the closest flag of '{path}' is '{closest}' ('{path} --help' lists them all)"
            ),
            None => format!("'{path}' takes no flags like it; '{path} --help' lists them"),
        }
    };
    // clap's own text, without its tip lines (`-- --flag`, a look-alike flag).
    let rendered = error.render().to_string();
    let mut text = String::new();
    let mut lines = rendered.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("tip:") {
            // The blank line that separated the tip goes with it.
            if lines.peek().is_some_and(|next| next.trim().is_empty()) {
                lines.next();
            }
            continue;
        }
        text.push_str(line);
        text.push('\n');
        if line.starts_with("error:") {
            text.push_str(&format!("\n  tip: {hint}\n"));
        }
    }
    ExplainedError::Unknown(text)
}

/// At a command that takes Kafka's action flags, reached with none (`sluice topics --lst`):
/// the mistyped action's closest action flag, else the actions there are. The parser names
/// the first flag it does not know, which may be one of the action's own (`--entity-type`)
/// before the mistyped action, so every flag given is looked at.
fn action_hint(path: &str, command: &clap::Command, args: &[OsString]) -> Option<String> {
    if !command.has_subcommands() {
        return None;
    }
    let (_, actions) = ACTION_FLAGS
        .iter()
        .find(|(name, _)| path.strip_prefix("sluice ") == Some(*name))?;
    let action_flags: Vec<String> = actions.iter().map(|(flag, _)| (*flag).to_owned()).collect();
    let mistyped = args
        .iter()
        .skip(2)
        .filter_map(|arg| arg.to_str())
        .filter(|arg| arg.starts_with("--"))
        .find_map(|arg| {
            let typed = arg.split('=').next().unwrap_or(arg);
            closest_flag(typed, &action_flags).map(|closest| (typed, closest))
        });
    Some(match mistyped {
        Some((typed, closest)) => format!(
            "'{typed}' is no action of '{path}'; the closest is '{closest}' ('{path} --help' lists the actions)"
        ),
        None => format!(
            "'{path}' needs an action first: {} (or its subcommand; '{path} --help' lists them)",
            action_flags.join(", ")
        ),
    })
}

/// What [`explain`] gives back.
pub enum ExplainedError {
    /// The parser's error as it is.
    Clap(clap::Error),
    /// An unknown flag, explained: the text to print (exit code 2).
    Unknown(String),
}

impl ExplainedError {
    /// Prints the error and exits: 2 for usage errors, 0 for help and version.
    pub fn exit(self) -> ! {
        match self {
            ExplainedError::Clap(error) => error.exit(),
            ExplainedError::Unknown(text) => {
                eprint!("{text}");
                std::process::exit(2)
            }
        }
    }
}

/// The (sub)command the arguments reached, and its path (`sluice topics create`).
fn command_of<'a>(root: &'a clap::Command, args: &[OsString]) -> (String, &'a clap::Command) {
    let mut command = root;
    let mut path = root.get_name().to_owned();
    for arg in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if arg.starts_with('-') {
            continue;
        }
        match command.find_subcommand(arg) {
            Some(sub) => {
                path.push(' ');
                path.push_str(sub.get_name());
                command = sub;
            }
            None => {
                if command.has_subcommands() {
                    continue;
                }
                break;
            }
        }
    }
    (path, command)
}

/// Every `--long` flag of a command, visible or alias.
fn long_flags(command: &clap::Command) -> Vec<String> {
    let mut flags = vec!["--help".to_owned()];
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long() {
            flags.push(format!("--{long}"));
        }
        for alias in arg.get_all_aliases().unwrap_or_default() {
            flags.push(format!("--{alias}"));
        }
    }
    flags
}

/// The flag nearest to `typed`: the fewest edits, a shared start breaking ties; `None` when
/// even the nearest shares too little with it to be what was meant.
fn closest_flag(typed: &str, flags: &[String]) -> Option<String> {
    let typed_name = typed.trim_start_matches('-');
    flags
        .iter()
        .map(|flag| {
            let name = flag.trim_start_matches('-');
            let distance = edit_distance(typed_name, name);
            // One contains the other (`--partition` for `--partitions`): as good as one edit.
            let distance =
                if !name.is_empty() && (name.contains(typed_name) || typed_name.contains(name)) {
                    distance.min(name.len().abs_diff(typed_name.len()).min(1))
                } else {
                    distance
                };
            let shared_start = typed_name
                .chars()
                .zip(name.chars())
                .take_while(|(a, b)| a == b)
                .count();
            (distance, std::cmp::Reverse(shared_start), flag)
        })
        .min()
        .filter(|(distance, _, flag)| {
            *distance <= flag.trim_start_matches('-').len().max(typed_name.len()) / 2
        })
        .map(|(_, _, flag)| flag.clone())
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<OsString> {
        text.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn kafka_action_flags_become_subcommands_and_subcommands_stay() {
        assert_eq!(
            rewrite(args(
                "sluice topics --bootstrap-server b:1 --create --topic t"
            )),
            args("sluice topics create --bootstrap-server b:1 --topic t")
        );
        assert_eq!(
            rewrite(args("sluice groups --describe --group g")),
            args("sluice groups describe --group g")
        );
        assert_eq!(
            rewrite(args(
                "sluice configs --entity-type topics --alter --delete-config a"
            )),
            args("sluice configs alter --entity-type topics --delete-config a")
        );
        assert_eq!(
            rewrite(args(
                "sluice acls --bootstrap-server b:1 --add --allow-principal User:a --topic t"
            )),
            args("sluice acls add --bootstrap-server b:1 --allow-principal User:a --topic t")
        );
        assert_eq!(
            rewrite(args(
                "sluice log-dirs --describe --bootstrap-server b:1 --broker-list 1,2"
            )),
            args("sluice log-dirs describe --bootstrap-server b:1 --broker-list 1,2")
        );
        // Already a subcommand; --delete-config is not --delete; other commands untouched.
        for same in [
            "sluice topics create t --delete",
            "sluice configs --delete-config x",
            "sluice produce --list",
            "sluice topics --help",
        ] {
            assert_eq!(rewrite(args(same)), args(same));
        }
    }

    #[test]
    fn flags_typed_before_a_subcommand_are_its_own() {
        use clap::CommandFactory as _;
        let root = crate::Cli::command();
        assert_eq!(
            subcommand_first(
                args("sluice groups --bootstrap-server b:1 describe g"),
                &root
            ),
            args("sluice groups describe --bootstrap-server b:1 g")
        );
        assert_eq!(
            subcommand_first(
                args("sluice groups --bootstrap-server=b:1 translate g --execute"),
                &root
            ),
            args("sluice groups translate --bootstrap-server=b:1 g --execute")
        );
        // A value that happens to be a subcommand's name is a value.
        assert_eq!(
            subcommand_first(args("sluice groups --group list describe"), &root),
            args("sluice groups describe --group list")
        );
        let untouched = args("sluice groups describe --bootstrap-server b:1 g");
        assert_eq!(subcommand_first(untouched.clone(), &root), untouched);
    }

    #[test]
    fn the_closest_flag_is_the_fewest_edits_away() {
        let flags: Vec<String> = ["--topic", "--partitions", "--output", "--bootstrap-server"]
            .map(String::from)
            .to_vec();
        assert_eq!(closest_flag("--topicc", &flags).as_deref(), Some("--topic"));
        assert_eq!(
            closest_flag("--partition", &flags).as_deref(),
            Some("--partitions")
        );
        assert_eq!(
            closest_flag("--bootstrap-servers", &flags).as_deref(),
            Some("--bootstrap-server")
        );
        assert_eq!(closest_flag("--zzzzzzzzzz", &flags), None);
    }
}

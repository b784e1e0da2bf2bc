//! `ssl.principal.mapping.rules` (KIP-371): how the subject of a client certificate becomes a
//! Kafka user name, with the semantics of Kafka's `SslPrincipalMapper`.
//!
//! The value is a list of rules separated by commas (or newlines, as Kafka's documentation
//! lays them out), tried in order:
//! - `DEFAULT`: the distinguished name unchanged;
//! - `RULE:pattern/replacement/` with an optional `L` or `U` after the last slash (lower or
//!   upper case the result): applies when the pattern matches the whole distinguished name
//!   (Java's `Matcher.matches()`); the result is the name with every match of the pattern
//!   replaced (Java's `String.replaceAll`), `$1` and `${name}` naming groups, `\` escaping the
//!   next character. A `/` (or `\`) in the pattern or the replacement is written `\/` (`\\`).
//!
//! The first rule that applies names the user; when none does, the connection is refused with
//! Kafka's "No rules apply to <dn>, rules [...]". An empty item between separators is ignored;
//! anything else (trailing text after `/L`, a missing slash, an invalid regex) is refused when
//! the rules are parsed, not when a client connects.
//!
//! Differences from Kafka, all at parse time: patterns are Rust `regex` syntax (Java's
//! look-around and back-references are refused); a `$` not followed by a group number or
//! `{name}`, a trailing `\` and a `${name}` of a group that does not exist are refused where
//! Java would throw on the first matching client; a `$n` beyond the pattern's groups is
//! literal text even when the pattern has no group at all (Kafka makes it literal only when
//! the pattern has at least one group).

use regex::{Regex, RegexBuilder};

use super::TlsError;

/// The longest `ssl.principal.mapping.rules` value accepted. Real values are a few rules.
pub const PRINCIPAL_MAPPING_RULES_BYTES_MAX: usize = 64 * 1024;
/// The largest compiled size of one rule's pattern (the `regex` crate's size limit), so a
/// pattern such as `(a{1000}){1000}` is refused instead of built.
const RULE_PATTERN_COMPILED_BYTES_MAX: usize = 1024 * 1024;
/// The longest name a rule may produce. A replacement is applied per match and a pattern may
/// match (empty) at every position, so the result is bounded rather than trusted.
pub const PRINCIPAL_NAME_BYTES_MAX: usize = 64 * 1024;

/// A parsed `ssl.principal.mapping.rules` value.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Pattern(PatternRule),
}

#[derive(Debug, Clone)]
struct PatternRule {
    /// The pattern as written, for messages.
    pattern_text: String,
    /// The replacement as written, for messages.
    replacement_text: String,
    /// The pattern anchored at both ends: whether the rule applies.
    whole: Regex,
    /// The pattern as written: what is replaced.
    pattern: Regex,
    replacement: Vec<Piece>,
    case: Case,
}

/// A part of a parsed replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Group(usize),
    NamedGroup(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Unchanged,
    Lower,
    Upper,
}

impl PrincipalMapper {
    /// Parses `ssl.principal.mapping.rules`. An empty value parses to no rules, which refuses
    /// every certificate (as Kafka does); the config supplies `DEFAULT` when the key is unset.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, TlsError> {
        if rules.len() > PRINCIPAL_MAPPING_RULES_BYTES_MAX {
            return Err(TlsError::PrincipalMappingRulesTooLong {
                bytes: rules.len(),
                max: PRINCIPAL_MAPPING_RULES_BYTES_MAX,
            });
        }
        let mut parsed = Vec::new();
        let mut rest = rules.trim_start();
        while !rest.is_empty() {
            let (rule, after) = next_rule(rest)?;
            parsed.extend(rule);
            let after = trim_start_within_line(after);
            // `next_rule` stops at a separator or at the end.
            debug_assert!(after.is_empty() || after.starts_with(is_separator));
            rest = after.get(1..).unwrap_or("").trim_start();
        }
        Ok(PrincipalMapper { rules: parsed })
    }

    /// The user name for a client certificate's subject (as [`super::subject_dn`] prints it):
    /// the first rule that applies names it, or the connection is refused.
    pub fn name(&self, distinguished_name: &str) -> Result<String, TlsError> {
        for rule in &self.rules {
            if let Some(name) = rule.apply(distinguished_name)? {
                return Ok(name);
            }
        }
        Err(TlsError::NoMatchingPrincipalMappingRule {
            distinguished_name: distinguished_name.to_string(),
            rules: self
                .rules
                .iter()
                .map(Rule::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Kafka lists rules in its "No rules apply" message this way.
impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Default => f.write_str("DEFAULT"),
            Rule::Pattern(rule) => {
                write!(f, "RULE:{}/{}", rule.pattern_text, rule.replacement_text)?;
                match rule.case {
                    Case::Unchanged => Ok(()),
                    Case::Lower => f.write_str("/L"),
                    Case::Upper => f.write_str("/U"),
                }
            }
        }
    }
}

impl Rule {
    /// The name this rule gives, or `None` when it does not apply.
    fn apply(&self, distinguished_name: &str) -> Result<Option<String>, TlsError> {
        let rule = match self {
            Rule::Default => return Ok(Some(distinguished_name.to_string())),
            Rule::Pattern(rule) => rule,
        };
        if !rule.whole.is_match(distinguished_name) {
            return Ok(None);
        }
        let too_long = || TlsError::PrincipalNameTooLong {
            rule: self.to_string(),
            max: PRINCIPAL_NAME_BYTES_MAX,
        };
        let mut name = String::new();
        let mut copied_to = 0;
        for captures in rule.pattern.captures_iter(distinguished_name) {
            let Some(matched) = captures.get(0) else {
                continue;
            };
            name.push_str(&distinguished_name[copied_to..matched.start()]);
            for piece in &rule.replacement {
                match piece {
                    Piece::Literal(text) => name.push_str(text),
                    Piece::Group(index) => {
                        name.push_str(captures.get(*index).map_or("", |group| group.as_str()))
                    }
                    Piece::NamedGroup(group) => {
                        name.push_str(captures.name(group).map_or("", |group| group.as_str()))
                    }
                }
            }
            copied_to = matched.end();
            if name.len() > PRINCIPAL_NAME_BYTES_MAX {
                return Err(too_long());
            }
        }
        name.push_str(&distinguished_name[copied_to..]);
        if name.len() > PRINCIPAL_NAME_BYTES_MAX {
            return Err(too_long());
        }
        Ok(Some(match rule.case {
            Case::Unchanged => name,
            Case::Lower => name.to_lowercase(),
            Case::Upper => name.to_uppercase(),
        }))
    }
}

fn is_separator(c: char) -> bool {
    c == ',' || c == '\n'
}

/// Skips spaces and tabs but not the newline that may separate rules.
fn trim_start_within_line(text: &str) -> &str {
    text.trim_start_matches(|c: char| c.is_whitespace() && c != '\n')
}

/// The position of the next separator, or the end.
fn separator_position(text: &str) -> usize {
    text.find(is_separator).unwrap_or(text.len())
}

/// Parses the rule at the start of `text` (no leading whitespace). Returns the rule (`None` for
/// an empty item) and the text after it, which starts at a separator or is empty.
fn next_rule(text: &str) -> Result<(Option<Rule>, &str), TlsError> {
    if let Some(after) = text.strip_prefix("DEFAULT") {
        let rest = trim_start_within_line(after);
        if rest.is_empty() || rest.starts_with(is_separator) {
            return Ok((Some(Rule::Default), rest));
        }
    }
    if let Some(body) = text.strip_prefix("RULE:")
        && let Some((pattern, after_pattern)) = split_at_unescaped_slash(body)
        && let Some((replacement, after_replacement)) = split_at_unescaped_slash(after_pattern)
    {
        let (case, after_case) = match after_replacement.as_bytes().first() {
            Some(b'L') => (Case::Lower, &after_replacement[1..]),
            Some(b'U') => (Case::Upper, &after_replacement[1..]),
            _ => (Case::Unchanged, after_replacement),
        };
        let end = separator_position(after_case);
        let written = text[..text.len() - after_case.len() + end].trim_end();
        let unmatched = after_case[..end].trim();
        if !unmatched.is_empty() {
            return Err(invalid(
                written,
                format!("unmatched substring `{unmatched}` after the last `/`"),
            ));
        }
        let rule = pattern_rule(written, pattern, replacement, case)?;
        return Ok((Some(Rule::Pattern(rule)), &after_case[end..]));
    }
    let end = separator_position(text);
    let item = text[..end].trim_end();
    if item.is_empty() {
        return Ok((None, &text[end..]));
    }
    Err(invalid(
        item,
        "a rule is DEFAULT or RULE:pattern/replacement/ with an optional L or U".to_string(),
    ))
}

/// Splits at the first `/` not escaped by a backslash. The escapes stay in the text: they mean
/// the same to the regex and to the replacement.
fn split_at_unescaped_slash(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (index, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&text[..index], &text[index + 1..])),
            _ => {}
        }
    }
    None
}

fn invalid(rule: &str, detail: String) -> TlsError {
    TlsError::InvalidPrincipalMappingRule {
        rule: rule.to_string(),
        detail,
    }
}

fn pattern_rule(
    written: &str,
    pattern: &str,
    replacement: &str,
    case: Case,
) -> Result<PatternRule, TlsError> {
    let compile = |source: &str| {
        RegexBuilder::new(source)
            .size_limit(RULE_PATTERN_COMPILED_BYTES_MAX)
            .build()
            .map_err(|error| {
                invalid(
                    written,
                    format!("the pattern is not a valid regex: {error}"),
                )
            })
    };
    let compiled = compile(pattern)?;
    // Compiled alone first: wrapping an invalid pattern must not make it valid.
    let whole = compile(&format!(r"\A(?:{pattern})\z"))?;
    let groups = compiled.captures_len() - 1;
    let names: Vec<&str> = compiled.capture_names().flatten().collect();
    let pieces = parse_replacement(replacement, groups, &names)
        .map_err(|detail| invalid(written, detail))?;
    Ok(PatternRule {
        pattern_text: pattern.to_string(),
        replacement_text: replacement.to_string(),
        whole,
        pattern: compiled,
        replacement: pieces,
        case,
    })
}

/// Parses a replacement as Java's `Matcher.appendReplacement` reads it, with Kafka's rule that
/// a `$n` naming a group the pattern does not have is literal text. A multi-digit `$n` takes
/// as many digits as still name a group (`$12` is group 12 with twelve groups, group 1 then
/// `2` with fewer).
fn parse_replacement(
    replacement: &str,
    groups: usize,
    names: &[&str],
) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = replacement.chars().peekable();
    let flush = |literal: &mut String, pieces: &mut Vec<Piece>| {
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(literal)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => literal.push(escaped),
                None => {
                    return Err("the replacement ends with a `\\` that escapes nothing".to_string());
                }
            },
            '$' => match chars.peek().copied() {
                Some('{') => {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => {
                                return Err(format!(
                                    "`${{{name}` in the replacement is not closed"
                                ));
                            }
                        }
                    }
                    if !names.contains(&name.as_str()) {
                        return Err(format!("the pattern has no group named `{name}`"));
                    }
                    flush(&mut literal, &mut pieces);
                    pieces.push(Piece::NamedGroup(name));
                }
                Some(digit) if digit.is_ascii_digit() => {
                    let mut group = digit.to_digit(10).map_or(usize::MAX, |d| d as usize);
                    if group > groups {
                        literal.push('$');
                        continue;
                    }
                    chars.next();
                    while let Some(next) = chars.peek().and_then(|c| c.to_digit(10)) {
                        match group
                            .checked_mul(10)
                            .and_then(|g| g.checked_add(next as usize))
                        {
                            Some(longer) if longer <= groups => {
                                group = longer;
                                chars.next();
                            }
                            _ => break,
                        }
                    }
                    flush(&mut literal, &mut pieces);
                    pieces.push(Piece::Group(group));
                }
                _ => {
                    return Err(
                        "a `$` in the replacement must be followed by a group number or `{name}`; \
                         write `\\$` for a `$`"
                            .to_string(),
                    );
                }
            },
            c => literal.push(c),
        }
    }
    flush(&mut literal, &mut pieces);
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "CN=alice,OU=eng,O=acme,C=US";

    fn name(rules: &str, distinguished_name: &str) -> Result<String, TlsError> {
        PrincipalMapper::parse(rules)
            .unwrap()
            .name(distinguished_name)
    }

    #[test]
    fn default_keeps_the_distinguished_name() {
        assert_eq!(name("DEFAULT", ALICE).unwrap(), ALICE);
    }

    #[test]
    fn a_rule_applies_only_when_its_pattern_matches_the_whole_name() {
        assert_eq!(name("RULE:^CN=(.*?),OU=.*$/$1/L", ALICE).unwrap(), "alice");
        // Unanchored patterns still have to match all of the name.
        assert_eq!(name("RULE:CN=(.*?),OU=.*/$1/", ALICE).unwrap(), "alice");
        assert!(name("RULE:CN=(.*?),OU=eng/$1/", ALICE).is_err());
        assert!(name("RULE:OU=eng/x/", ALICE).is_err());
    }

    #[test]
    fn the_first_rule_that_applies_wins_and_later_ones_are_not_tried() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n\
                     RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$2/U,\n\
                     DEFAULT";
        assert_eq!(name(rules, ALICE).unwrap(), "ALICE@ENG");
        assert_eq!(name(rules, "CN=svc,OU=ServiceUsers,O=acme").unwrap(), "svc");
        assert_eq!(name(rules, "UID=bob").unwrap(), "UID=bob");
    }

    #[test]
    fn case_suffixes_lower_and_upper_the_result() {
        assert_eq!(name("RULE:^CN=([^,]*),.*$/$1/U", ALICE).unwrap(), "ALICE");
        assert_eq!(
            name("RULE:^(.*)$/$1/L", "CN=Alice,O=ACME").unwrap(),
            "cn=alice,o=acme"
        );
        assert_eq!(name("RULE:^(.*)$/$1/", "CN=Alice").unwrap(), "CN=Alice");
    }

    #[test]
    fn no_rule_applying_refuses_with_kafkas_message() {
        let error = name("RULE:^CN=bob,.*$/bob/, RULE:^UID=(.*)$/$1/L", ALICE).unwrap_err();
        assert_eq!(
            error.to_string(),
            "No rules apply to CN=alice,OU=eng,O=acme,C=US, rules \
             [RULE:^CN=bob,.*$/bob, RULE:^UID=(.*)$/$1/L]"
        );
        assert!(name("", ALICE).is_err(), "no rules refuse every name");
    }

    #[test]
    fn rules_may_be_separated_by_commas_newlines_and_blanks() {
        let mapper =
            PrincipalMapper::parse(" ,RULE:^CN=x$/y/ ,\n\n  RULE:^(CN=a.*)$/$1/L\nDEFAULT, ")
                .unwrap();
        assert_eq!(mapper.rules.len(), 3);
        assert_eq!(mapper.name(ALICE).unwrap(), ALICE.to_lowercase());
    }

    #[test]
    fn replacements_read_like_javas() {
        // `$n` beyond the groups is literal; a longer number takes as many digits as name a
        // group; `\` escapes; named groups; every match is replaced (`replaceAll`).
        assert_eq!(
            name("RULE:^CN=(\\w+).*$/$1@$2/", ALICE).unwrap(),
            "alice@$2"
        );
        assert_eq!(name("RULE:^CN=(\\w+).*$/$10/", ALICE).unwrap(), "alice0");
        assert_eq!(
            name("RULE:^CN=(\\w+).*$/\\$1\\\\$1\\//", ALICE).unwrap(),
            "$1\\alice/"
        );
        assert_eq!(
            name("RULE:^CN=(?P<user>\\w+).*$/${user}!/", ALICE).unwrap(),
            "alice!"
        );
        assert_eq!(
            name("RULE:(?:\\w+=(\\w+),?)+/[$0]/", ALICE).unwrap(),
            format!("[{ALICE}]")
        );
        assert_eq!(
            name("RULE:a|ab/X/", "ab").unwrap(),
            "Xb",
            "replaceAll finds `a` first"
        );
        assert_eq!(name("RULE:a\\/b/$0/", "a/b").unwrap(), "a/b");
    }

    #[test]
    fn malformed_rules_are_refused_when_parsed() {
        for rules in [
            "RULE:^CN=(.*)$/$1/Lx",
            "RULE:^CN=(.*)$/$1/LU",
            "RULE:^CN=(.*)$/$1",
            "RULE:^CN=(.*)$",
            "DEFAULTS",
            "DEFAULT RULE:a/b/",
            "rule:a/b/",
            "RULE:(unclosed/x/",
            "RULE:(?=lookahead)/x/",
            "RULE:a/$x/",
            "RULE:a/x\\/",
            "RULE:(a)/${missing}/",
            "RULE:(a{1000}){1000}/x/",
        ] {
            assert!(
                PrincipalMapper::parse(rules).is_err(),
                "{rules:?} was accepted"
            );
        }
    }

    #[test]
    fn the_rules_text_is_bounded() {
        let long = format!("DEFAULT,{}", " ".repeat(PRINCIPAL_MAPPING_RULES_BYTES_MAX));
        assert!(matches!(
            PrincipalMapper::parse(&long),
            Err(TlsError::PrincipalMappingRulesTooLong { .. })
        ));
    }

    #[test]
    fn a_replacement_applied_at_every_position_is_bounded() {
        let replacement = "x".repeat(1024);
        let mapper = PrincipalMapper::parse(&format!("RULE:(?:.)*?/{replacement}/")).unwrap();
        assert!(mapper.name(&"a".repeat(100)).is_err());
    }
}

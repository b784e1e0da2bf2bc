//! Kafka's JAAS configuration values: `sasl.jaas.config` and
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`. Kafka reads them with Java's
//! `StreamTokenizer`, and so do we, by the same rules:
//! ```text
//! value   = entry                      exactly one entry, as Kafka demands of these settings
//! entry   = module flag *option ";"
//! module  = word                       e.g. org.apache.kafka.common.security.plain.PlainLoginModule
//! flag    = word                       required | requisite | sufficient | optional (any case)
//! option  = word "=" (quoted | word)
//! word    = 1*(ALPHA / DIGIT / "." / "-" / "_" / "$" / any character from U+00A0)
//! quoted  = '"' ... '"' | "'" ... "'"  backslash escapes: \n \t \r \b \f, else the character itself
//! ```
//! Whitespace separates tokens; `// ...` and `/* ... */` are comments. Unlike Java, an
//! unquoted number is a word (Kafka rejects `key=5`; quoting it works in both).
//!
//! For PLAIN the broker's entry lists its users as `user_<name>="<password>"` options; a
//! client's (and a broker's own inter-broker login) has `username` and `password`.
//!
//! A JAAS *file* (Kafka's `-Djava.security.auth.login.config`, read by [`parse_jaas_file`])
//! holds named sections of entries:
//! ```text
//! file    = *(name "{" *entry "}" ";")    e.g. KafkaServer { ... };  sasl_ssl.KafkaServer { ... };
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::SaslError;

/// The longest JAAS value accepted, checked before it is read.
const JAAS_CONFIG_BYTES_MAX: usize = 64 * 1024;
/// The longest JAAS file accepted (many PLAIN users), checked before it is read.
pub const JAAS_FILE_BYTES_MAX: usize = 1024 * 1024;

/// One parsed JAAS login module entry.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasConfig {
    /// The login module's class name, e.g. `org.apache.kafka.common.security.scram.ScramLoginModule`.
    pub login_module: String,
    /// The control flag, lowercase: `required`, `requisite`, `sufficient` or `optional`.
    pub control_flag: String,
    /// The options, by key. A repeated key keeps its last value, as in Kafka.
    pub options: BTreeMap<String, String>,
}

// Passwords stay out of logs: only the option keys are shown.
impl fmt::Debug for JaasConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaasConfig")
            .field("login_module", &self.login_module)
            .field("control_flag", &self.control_flag)
            .field("option_keys", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl JaasConfig {
    /// PLAIN's users, from the `user_<name>` options: name to password.
    pub fn plain_users(&self) -> BTreeMap<String, String> {
        self.options
            .iter()
            .filter_map(|(key, password)| {
                let name = key.strip_prefix("user_").filter(|name| !name.is_empty())?;
                Some((name.to_owned(), password.clone()))
            })
            .collect()
    }

    /// The `username` option: who a client (or the broker, between brokers) logs in as.
    pub fn username(&self) -> Option<&str> {
        self.options.get("username").map(String::as_str)
    }

    /// The `password` option.
    pub fn password(&self) -> Option<&str> {
        self.options.get("password").map(String::as_str)
    }
}

/// Parses a JAAS configuration value holding exactly one login module entry.
pub fn parse_jaas(value: &str) -> Result<JaasConfig, SaslError> {
    if value.len() > JAAS_CONFIG_BYTES_MAX {
        return Err(bad(format!(
            "the value is {} bytes, more than {JAAS_CONFIG_BYTES_MAX}",
            value.len()
        )));
    }
    let mut tokens = Lexer::new(value);
    let mut entries = Vec::new();
    while let Some(first) = tokens.next()? {
        entries.push(parse_entry(first, &mut tokens)?);
    }
    let count = entries.len();
    match entries.pop() {
        Some(entry) if count == 1 => Ok(entry),
        _ => Err(bad(format!(
            "the value holds {count} login modules, it must hold exactly 1"
        ))),
    }
}

/// Parses a JAAS file: its sections by name (a name given twice keeps its entries in order,
/// as Java's `ConfigFile` appends them), each with its login module entries in order.
pub fn parse_jaas_file(text: &str) -> Result<BTreeMap<String, Vec<JaasConfig>>, SaslError> {
    if text.len() > JAAS_FILE_BYTES_MAX {
        return Err(bad(format!(
            "the file is {} bytes, more than {JAAS_FILE_BYTES_MAX}",
            text.len()
        )));
    }
    let mut tokens = Lexer::new(text);
    let mut sections: BTreeMap<String, Vec<JaasConfig>> = BTreeMap::new();
    while let Some(first) = tokens.next()? {
        let name = first.expect_word("a section name (e.g. KafkaServer)")?;
        let brace = tokens.expect("'{' after section", &name)?;
        if brace.token != Token::OpenBrace {
            return Err(bad(format!(
                "expected '{{' after section {name:?} at character {}, found {}",
                brace.position, brace.token
            )));
        }
        let entries = sections.entry(name.clone()).or_default();
        loop {
            let token = tokens.expect("an entry or '}' of section", &name)?;
            if token.token == Token::CloseBrace {
                break;
            }
            entries.push(parse_entry(token, &mut tokens)?);
        }
        let end = tokens.expect("';' after section", &name)?;
        if end.token != Token::Semicolon {
            return Err(bad(format!(
                "expected ';' after the '}}' of section {name:?} at character {}, found {}",
                end.position, end.token
            )));
        }
    }
    Ok(sections)
}

fn bad(what: String) -> SaslError {
    SaslError::BadConfig {
        what: format!("JAAS config: {what}"),
    }
}

/// One entry, from its first token through its `;`.
fn parse_entry(first: Positioned, tokens: &mut Lexer<'_>) -> Result<JaasConfig, SaslError> {
    let login_module = first.expect_word("a login module class name")?;
    let flag = tokens.expect("the control flag of", &login_module)?;
    let flag_position = flag.position;
    let control_flag = flag.expect_word("a control flag")?.to_ascii_lowercase();
    if !["required", "requisite", "sufficient", "optional"].contains(&control_flag.as_str()) {
        return Err(bad(format!(
            "invalid control flag {control_flag:?} at character {flag_position}: expected \
             required, requisite, sufficient or optional"
        )));
    }
    let mut options = BTreeMap::new();
    loop {
        let token = tokens.expect("';' or an option of", &login_module)?;
        if token.token == Token::Semicolon {
            break;
        }
        let key = token.expect_word("an option key or ';'")?;
        let equals = tokens.expect("'=' after option", &key)?;
        if equals.token != Token::Equals {
            return Err(bad(format!(
                "expected '=' after option {key:?} at character {}, found {}",
                equals.position, equals.token
            )));
        }
        let value = tokens.expect("the value of option", &key)?;
        let value = match value.token {
            Token::Word(text) | Token::Quoted(text) => text,
            other => {
                return Err(bad(format!(
                    "expected the value of option {key:?} at character {}, found {other}",
                    value.position
                )));
            }
        };
        options.insert(key, value);
    }
    Ok(JaasConfig {
        login_module,
        control_flag,
        options,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Equals,
    Semicolon,
    OpenBrace,
    CloseBrace,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(word) => write!(f, "{word:?}"),
            Token::Quoted(_) => f.write_str("a quoted value"),
            Token::Equals => f.write_str("'='"),
            Token::Semicolon => f.write_str("';'"),
            Token::OpenBrace => f.write_str("'{'"),
            Token::CloseBrace => f.write_str("'}'"),
        }
    }
}

/// A token and the character (counted from 1) it starts at.
struct Positioned {
    token: Token,
    position: usize,
}

impl Positioned {
    fn expect_word(self, expected: &str) -> Result<String, SaslError> {
        match self.token {
            Token::Word(word) => Ok(word),
            other => Err(bad(format!(
                "expected {expected} at character {}, found {other}",
                self.position
            ))),
        }
    }
}

/// Splits a value into tokens, as Java's `StreamTokenizer` configured by Kafka does.
struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    /// Characters consumed so far: the next character is at `consumed + 1`.
    consumed: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Lexer {
            chars: text.chars().peekable(),
            consumed: 0,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let next = self.chars.next()?;
        self.consumed += 1;
        Some(next)
    }

    /// The next token, or an error naming what was expected (`expected` `subject`) when the
    /// value ends.
    fn expect(&mut self, expected: &str, subject: &str) -> Result<Positioned, SaslError> {
        self.next()?.ok_or_else(|| {
            bad(format!(
                "expected {expected} {subject:?} at character {}, found the end of the value \
                 (is the ';' ending the entry missing?)",
                self.consumed + 1
            ))
        })
    }

    fn next(&mut self) -> Result<Option<Positioned>, SaslError> {
        self.skip_blanks_and_comments()?;
        let position = self.consumed + 1;
        let Some(c) = self.bump() else {
            return Ok(None);
        };
        let token = match c {
            '=' => Token::Equals,
            ';' => Token::Semicolon,
            '{' => Token::OpenBrace,
            '}' => Token::CloseBrace,
            '"' | '\'' => Token::Quoted(self.quoted(c, position)?),
            c if is_word_char(c) => {
                let mut word = String::from(c);
                while let Some(&c) = self.chars.peek().filter(|&&c| is_word_char(c)) {
                    word.push(c);
                    self.bump();
                }
                Token::Word(word)
            }
            c => {
                return Err(bad(format!(
                    "unexpected character {c:?} at character {position}"
                )));
            }
        };
        Ok(Some(Positioned { token, position }))
    }

    fn skip_blanks_and_comments(&mut self) -> Result<(), SaslError> {
        loop {
            while self.chars.peek().is_some_and(|c| c.is_whitespace()) {
                self.bump();
            }
            if self.chars.peek() != Some(&'/') {
                return Ok(());
            }
            let position = self.consumed + 1;
            self.bump();
            match self.bump() {
                Some('/') => while self.bump().is_some_and(|c| c != '\n') {},
                Some('*') => {
                    let mut previous = '\0';
                    loop {
                        match self.bump() {
                            Some('/') if previous == '*' => break,
                            Some(c) => previous = c,
                            None => {
                                return Err(bad(format!(
                                    "unterminated comment starting at character {position}"
                                )));
                            }
                        }
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "unexpected character '/' at character {position}"
                    )));
                }
            }
        }
    }

    /// A quoted value after its opening `quote`, through the closing one.
    fn quoted(&mut self, quote: char, position: usize) -> Result<String, SaslError> {
        let unterminated = || {
            bad(format!(
                "unterminated quoted value starting at character {position}"
            ))
        };
        let mut value = String::new();
        loop {
            match self.bump().ok_or_else(unterminated)? {
                c if c == quote => return Ok(value),
                '\n' => return Err(unterminated()),
                '\\' => value.push(match self.bump().ok_or_else(unterminated)? {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                }),
                c => value.push(c),
            }
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '$') || c >= '\u{a0}'
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";

    fn error_text(value: &str) -> String {
        match parse_jaas(value) {
            Err(SaslError::BadConfig { what }) => what,
            other => panic!("{value:?} gave {other:?}"),
        }
    }

    #[test]
    fn a_jaas_file_holds_named_sections_of_entries() {
        let sections = parse_jaas_file(&format!(
            r#"// the broker's logins
            KafkaServer {{
                {PLAIN_MODULE} required
                username="admin" password="admin-secret"
                user_admin="admin-secret" user_alice="alice-secret";
                org.apache.kafka.common.security.scram.ScramLoginModule required;
            }};
            /* a listener's own */ sasl_ssl.KafkaServer {{
                {PLAIN_MODULE} required user_bob="bob-secret";
            }};"#
        ))
        .unwrap();
        let server = &sections["KafkaServer"];
        assert_eq!(server.len(), 2);
        assert_eq!(server[0].plain_users()["alice"], "alice-secret");
        assert_eq!(server[0].username(), Some("admin"));
        assert!(server[1].login_module.ends_with("ScramLoginModule"));
        assert_eq!(
            sections["sasl_ssl.KafkaServer"][0].plain_users()["bob"],
            "bob-secret"
        );
        for (text, says) in [
            ("KafkaServer { a required; }", "expected ';' after section"),
            ("KafkaServer a required; };", "expected '{' after section"),
            ("KafkaServer { a required;", "an entry or '}'"),
            ("{ a required; };", "a section name"),
        ] {
            match parse_jaas_file(text) {
                Err(SaslError::BadConfig { what }) => {
                    assert!(what.contains(says), "{text}: {what}")
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn broker_plain_entry_with_several_users() {
        let config = parse_jaas(&format!(
            r#"{PLAIN_MODULE} required username="admin" password="admin-secret"
               user_admin="admin-secret" user_alice="alice-secret";"#
        ))
        .unwrap();
        assert_eq!(config.login_module, PLAIN_MODULE);
        assert_eq!(config.control_flag, "required");
        assert_eq!(config.username(), Some("admin"));
        assert_eq!(config.password(), Some("admin-secret"));
        let users = config.plain_users();
        assert_eq!(users.len(), 2);
        assert_eq!(users["admin"], "admin-secret");
        assert_eq!(users["alice"], "alice-secret");
    }

    #[test]
    fn quoted_values_unescape_and_unquoted_values_are_words() {
        let config = parse_jaas(
            r#"org.example.Module OPTIONAL a="say \"hi\" \\ there" b='it''s' c=plain-token_1.$
               d="" e="x;y=z"; "#,
        );
        // 'it''s' is two quoted tokens: the second is not an option key.
        assert!(config.is_err());
        let config = parse_jaas(
            r#"org.example.Module OPTIONAL a="say \"hi\" \\ there\n" b='it\'s' c=plain-token_1.$
               d="" e="x;y=z" f=42;"#,
        )
        .unwrap();
        assert_eq!(config.control_flag, "optional");
        assert_eq!(config.options["a"], "say \"hi\" \\ there\n");
        assert_eq!(config.options["b"], "it's");
        assert_eq!(config.options["c"], "plain-token_1.$");
        assert_eq!(config.options["d"], "");
        assert_eq!(config.options["e"], "x;y=z");
        assert_eq!(config.options["f"], "42");
        assert_eq!(config.username(), None);
        assert!(config.plain_users().is_empty());
    }

    #[test]
    fn comments_and_layout_are_skipped_and_repeated_keys_keep_the_last() {
        let config = parse_jaas(
            "// the broker's login\n org.apache.kafka.common.security.scram.ScramLoginModule \
             /* flag: */ required\n\tusername=\"a\" username=\"b\" user_=\"ignored\"\n;",
        )
        .unwrap();
        assert_eq!(config.username(), Some("b"));
        assert!(config.plain_users().is_empty());
        let no_options = parse_jaas("m.Module sufficient;").unwrap();
        assert!(no_options.options.is_empty());
    }

    #[test]
    fn a_missing_semicolon_is_named() {
        let text = error_text(&format!(r#"{PLAIN_MODULE} required username="admin""#));
        assert!(text.contains("';'"), "{text}");
        assert!(text.contains("character 82"), "{text}");
    }

    #[test]
    fn errors_name_what_and_where() {
        let cases = [
            ("", "0 login modules"),
            ("m.A required; m.B required;", "2 login modules"),
            ("m.A", "control flag"),
            (
                "m.A mandatory;",
                "invalid control flag \"mandatory\" at character 5",
            ),
            (
                "m.A required key;",
                "'=' after option \"key\" at character 17",
            ),
            (
                "m.A required key=;",
                "value of option \"key\" at character 18",
            ),
            (
                "m.A required key=\"open;",
                "unterminated quoted value starting at character 18",
            ),
            ("m.A required key=\"a\nb\";", "unterminated quoted value"),
            ("m.A required k=v /* never closed;", "unterminated comment"),
            (
                "m.A required k=v & x;",
                "unexpected character '&' at character 18",
            ),
            (
                "\"m.A\" required;",
                "login module class name at character 1",
            ),
            ("m.A required =v;", "option key or ';' at character 14"),
        ];
        for (value, expected) in cases {
            let text = error_text(value);
            assert!(
                text.contains(expected),
                "{value:?}: {text:?} lacks {expected:?}"
            );
        }
        let huge = format!("m.A required k=\"{}\";", "x".repeat(JAAS_CONFIG_BYTES_MAX));
        assert!(error_text(&huge).contains("bytes"));
    }

    #[test]
    fn debug_output_shows_no_passwords() {
        let config = parse_jaas(r#"m.A required password="hunter2" user_bob="bob-pw";"#).unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("bob-pw"),
            "{shown}"
        );
        assert!(shown.contains("user_bob"), "{shown}");
    }
}

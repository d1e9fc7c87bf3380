//! The `.env` format a service's settings are uploaded in
//! (`PUT /v1/environments/{env}/services/{name}` with `{dotenv}`), parsed into
//! `(KEY, value)` pairs.
//!
//! Rules:
//! * one `KEY=value` per line; blank lines and lines whose first non-blank
//!   character is `#` are skipped; an optional `export ` prefix is dropped;
//!   CRLF line endings and a leading UTF-8 byte order mark are accepted;
//! * keys are `[A-Za-z_][A-Za-z0-9_]*`; whitespace around `=` is ignored;
//! * an unquoted value is trimmed, and a `#` preceded by whitespace starts a
//!   comment (`KEY=a#b` keeps `a#b`, `KEY=a #b` gives `a`); quotes inside it
//!   are kept as they are;
//! * `'single quoted'` values are literal, with no escapes;
//! * `"double quoted"` values understand `\n \r \t \\ \" \$`; any other
//!   backslash is kept together with the character after it (`"\d"` is the two
//!   characters `\d`, as in a shell's double quotes);
//! * a quoted value may span lines (a PEM key); an unclosed quote is reported
//!   at the line where it was opened; after the closing quote only whitespace
//!   and a comment may follow;
//! * `KEY=` is the empty value; a key given twice keeps its last value, at the
//!   position of its first appearance (docker compose does the same);
//! * no variable expansion: `$HOME` stays `$HOME`; a NUL byte is refused.
//!
//! Why hand-written: `dotenvy` (and `dotenv`, `dotenvs`) always expand `$VAR`
//! and `${VAR}` in unquoted and double-quoted values, from earlier lines or
//! from the server's own process environment, which would both change the
//! uploaded bytes and leak the server's variables into a box; and their parse
//! errors carry the offending line's text and a column, not the line number in
//! the file that we need to tell the uploader where to look.

use std::collections::HashMap;

/// A malformed upload: the 1-based line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct DotenvError {
    pub line: usize,
    pub message: String,
}

impl DotenvError {
    fn new(line: usize, message: impl Into<String>) -> Self {
        DotenvError {
            line,
            message: message.into(),
        }
    }
}

/// Parses a whole `.env` text into `(KEY, value)` pairs, one per key, in the
/// order keys first appear.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, DotenvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if let Some(n) = lines.iter().position(|l| l.contains('\0')) {
        return Err(DotenvError::new(
            n + 1,
            "contains a NUL byte, which no environment variable can hold; remove it",
        ));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut i = 0;
    while i < lines.len() {
        let (entry, next) = parse_entry(&lines, i)?;
        i = next;
        if let Some((key, value)) = entry {
            match index.get(&key) {
                Some(&at) => out[at].1 = value,
                None => {
                    index.insert(key.clone(), out.len());
                    out.push((key, value));
                }
            }
        }
    }
    Ok(out)
}

/// Parses the entry starting at `lines[i]`: `None` for a blank or comment
/// line, and the index of the line after it (a quoted value can span lines).
fn parse_entry(lines: &[&str], i: usize) -> Result<(Option<(String, String)>, usize), DotenvError> {
    let n = i + 1;
    let line = lines[i].trim_start();
    if line.is_empty() || line.starts_with('#') {
        return Ok((None, i + 1));
    }
    let line = strip_export(line);
    let key_len = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(line.len());
    let (key, rest) = line.split_at(key_len);
    let rest = rest.trim_start();
    let Some(rest) = rest.strip_prefix('=') else {
        let shown: String = line.chars().take(40).collect();
        return Err(DotenvError::new(
            n,
            match key {
                "" => format!(
                    "{shown:?} is not KEY=value: a name is letters, digits and _ and does not start with a digit"
                ),
                _ if rest.is_empty() => {
                    format!("{key} has no '=': write {key}=value (or {key}= for an empty value)")
                }
                _ => format!(
                    "{shown:?} is not KEY=value: a name is letters, digits and _ only, followed by '='"
                ),
            },
        ));
    };
    if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(DotenvError::new(
            n,
            format!(
                "{key:?} is not a valid name: a name is letters, digits and _ and does not start with a digit"
            ),
        ));
    }
    let trimmed = rest.trim_start_matches([' ', '\t']);
    let (value, next) = match trimmed.chars().next() {
        Some(q @ ('\'' | '"')) => quoted(lines, i, key, q, &trimmed[1..])?,
        _ => (unquoted(rest), i + 1),
    };
    Ok((Some((key.to_owned(), value)), next))
}

/// `export KEY=...` → `KEY=...`; `export=1` and `exporter=1` are keys.
fn strip_export(line: &str) -> &str {
    match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        _ => line,
    }
}

/// An unquoted value (`rest` is everything after `=`): up to a `#` that
/// follows whitespace, trimmed.
fn unquoted(rest: &str) -> String {
    let mut end = rest.len();
    let mut prev_blank = false;
    for (at, c) in rest.char_indices() {
        if c == '#' && prev_blank {
            end = at;
            break;
        }
        prev_blank = c == ' ' || c == '\t';
    }
    rest[..end].trim().to_owned()
}

/// A value in `q` quotes starting right after the opening quote on line
/// `lines[i]`, possibly continuing on later lines.
fn quoted(
    lines: &[&str],
    i: usize,
    key: &str,
    q: char,
    first: &str,
) -> Result<(String, usize), DotenvError> {
    let mut value = String::new();
    let mut j = i;
    let mut text = first;
    loop {
        let mut chars = text.char_indices();
        while let Some((at, c)) = chars.next() {
            if c == q {
                let after = text[at + 1..].trim_start();
                if !(after.is_empty() || after.starts_with('#')) {
                    let shown: String = after.chars().take(20).collect();
                    return Err(DotenvError::new(
                        j + 1,
                        format!(
                            "{key}: {shown:?} follows the closing quote; put the whole value inside the quotes, or start a comment with ' #'"
                        ),
                    ));
                }
                return Ok((value, j + 1));
            }
            if c == '\\' && q == '"' {
                match chars.next() {
                    Some((_, e)) => push_escape(&mut value, e),
                    // A backslash ending the line stays, with the line break.
                    None => value.push('\\'),
                }
                continue;
            }
            value.push(c);
        }
        j += 1;
        if j >= lines.len() {
            let kind = if q == '"' { "double" } else { "single" };
            return Err(DotenvError::new(
                i + 1,
                format!(
                    "{key}: the {kind} quote opened on this line is never closed; add the closing {q}"
                ),
            ));
        }
        value.push('\n');
        text = lines[j];
    }
}

/// The character a `\e` in double quotes stands for; unknown escapes keep
/// the backslash.
fn push_escape(value: &mut String, e: char) {
    match e {
        'n' => value.push('\n'),
        'r' => value.push('\r'),
        't' => value.push('\t'),
        '\\' | '"' | '$' => value.push(e),
        _ => {
            value.push('\\');
            value.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap()
    }

    fn one(text: &str) -> String {
        let v = ok(text);
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].1.clone()
    }

    fn err(text: &str) -> DotenvError {
        parse(text).unwrap_err()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plain_lines_comments_blank_and_export() {
        let text =
            "# a comment\n\n   # indented comment\nA=1\nexport B=two\n  C = three  \nexport\tD=4\n";
        assert_eq!(
            ok(text),
            pairs(&[("A", "1"), ("B", "two"), ("C", "three"), ("D", "4")])
        );
    }

    #[test]
    fn export_as_a_key_name() {
        assert_eq!(
            ok("export=1\nexporter=2\n"),
            pairs(&[("export", "1"), ("exporter", "2")])
        );
    }

    #[test]
    fn crlf_and_bom() {
        assert_eq!(
            ok("\u{feff}A=1\r\nB=\"x\r\ny\"\r\n"),
            pairs(&[("A", "1"), ("B", "x\ny")])
        );
    }

    #[test]
    fn unquoted_comments() {
        assert_eq!(one("A=value # comment"), "value");
        assert_eq!(one("A=value\t# comment"), "value");
        assert_eq!(one("A=a#b"), "a#b");
        assert_eq!(one("A=#notacomment"), "#notacomment");
        assert_eq!(one("A= # only a comment"), "");
        assert_eq!(one("A=http://x/#frag"), "http://x/#frag");
    }

    #[test]
    fn unquoted_keeps_inner_quotes_and_backslashes() {
        assert_eq!(one(r#"A=it's "x" \n"#), r#"it's "x" \n"#);
        assert_eq!(one("A=a   b"), "a   b");
    }

    #[test]
    fn empty_values() {
        assert_eq!(one("A="), "");
        assert_eq!(one("A=   "), "");
        assert_eq!(one("A=''"), "");
        assert_eq!(one("A=\"\""), "");
    }

    #[test]
    fn single_quotes_are_literal() {
        assert_eq!(one(r"A='a\nb $HOME \' "), r"a\nb $HOME \");
        assert_eq!(one("A=' keep spaces '"), " keep spaces ");
        assert_eq!(one("A='has # hash' # comment"), "has # hash");
        assert_eq!(one(r#"A='say "hi"'"#), r#"say "hi""#);
    }

    #[test]
    fn double_quote_escapes() {
        assert_eq!(
            one(r#"A="n\n r\r t\t bs\\ q\" d\$""#),
            "n\n r\r t\t bs\\ q\" d$"
        );
        // Unknown escapes keep both characters.
        assert_eq!(one(r#"A="\d\w\'\x""#), r"\d\w\'\x");
        assert_eq!(one(r#"A="it's # not a comment""#), "it's # not a comment");
    }

    #[test]
    fn no_expansion() {
        assert_eq!(one("A=$HOME"), "$HOME");
        assert_eq!(one("A=\"${HOME}/x\""), "${HOME}/x");
        assert_eq!(ok("B=1\nA=$B"), pairs(&[("B", "1"), ("A", "$B")]));
    }

    #[test]
    fn multi_line_values() {
        let pem =
            "KEY=\"-----BEGIN PRIVATE KEY-----\nMIIB\\nx\n-----END PRIVATE KEY-----\"\nNEXT=1\n";
        assert_eq!(
            ok(pem),
            pairs(&[
                (
                    "KEY",
                    "-----BEGIN PRIVATE KEY-----\nMIIB\nx\n-----END PRIVATE KEY-----"
                ),
                ("NEXT", "1")
            ])
        );
        assert_eq!(
            ok("A='line1\n  line2\n'\nB=2"),
            pairs(&[("A", "line1\n  line2\n"), ("B", "2")])
        );
        // A line break right after an escaping backslash keeps both.
        assert_eq!(one("A=\"x\\\ny\""), "x\\\ny");
    }

    #[test]
    fn unclosed_quote_names_the_opening_line() {
        let e = err("A=1\nB=\"never\nclosed\nC=3\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("never closed"), "{e}");
        assert!(e.to_string().starts_with("line 2: B:"), "{e}");
        assert_eq!(err("A='x").line, 1);
        // An escaped quote does not close.
        assert_eq!(err("A=\"x\\\"").line, 1);
    }

    #[test]
    fn text_after_closing_quote() {
        let e = err("A=1\nB=\"x\" y\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("follows the closing quote"), "{e}");
        // Reported on the line of the closing quote.
        assert_eq!(err("A='x\ny'z").line, 2);
        assert_eq!(one("A=\"x\"   # fine"), "x");
        assert_eq!(one("A=\"x\"  \t"), "x");
    }

    #[test]
    fn bad_keys() {
        for (text, line) in [
            ("A=1\n1A=2", 2),
            ("A-B=1", 1),
            ("=1", 1),
            ("A B=1", 1),
            ("\nNOEQUALS", 2),
            ("ÜBER=1", 1),
            ("export =1", 1),
        ] {
            let e = err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        assert!(err("NOEQUALS").message.contains("has no '='"));
        assert!(err("1A=2").message.contains("does not start with a digit"));
    }

    #[test]
    fn nul_is_refused() {
        let e = err("A=1\nB=x\0y\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("NUL"));
    }

    #[test]
    fn duplicates_last_wins_first_position() {
        assert_eq!(ok("A=1\nB=2\nA=3\n"), pairs(&[("A", "3"), ("B", "2")]));
    }

    #[test]
    fn non_ascii_values() {
        assert_eq!(one("A=héllo wörld ✓"), "héllo wörld ✓");
        assert_eq!(one("A=\"日本語\""), "日本語");
    }
}

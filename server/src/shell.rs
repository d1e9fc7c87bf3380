//! A value as one word of a POSIX shell command line, for the commands psbx
//! prints for people and agents to run (the one-line client setup, the AWS
//! CLI lines): as it is when no shell reads anything in it, so the line stays
//! readable, else single-quoted. (`mcp::shell_quote` always quotes: the upload
//! commands it builds are read by programs, not people.)

use std::borrow::Cow;

/// `value` as one shell word: as is when it holds only characters no shell
/// reads, else in single quotes (a `'` as `'\''`).
pub fn word(value: &str) -> Cow<'_, str> {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/@+=%".contains(c));
    if plain {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(format!("'{}'", value.replace('\'', "'\\''")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_stay_as_they_are_and_the_rest_is_quoted() {
        assert_eq!(word("arn:aws:iam::1:role/a"), "arn:aws:iam::1:role/a");
        assert_eq!(
            word("https://psbx.example.com/mcp"),
            "https://psbx.example.com/mcp"
        );
        assert_eq!(word(""), "''");
        assert_eq!(word("a b"), "'a b'");
        assert_eq!(word("it's $HOME"), "'it'\\''s $HOME'");
        assert_eq!(word("`x`;|&"), "'`x`;|&'");
        // A tilde expands at the start of a word: quoted.
        assert_eq!(word("~/x"), "'~/x'");
    }
}

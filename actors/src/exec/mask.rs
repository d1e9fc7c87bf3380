//! Masking secret values in output returned to a caller: every occurrence of a
//! secret value of 8 characters or more becomes `****`, also when the value is
//! split across chunks of a stream (the last `longest - 1` bytes of a chunk are
//! held back until the next one shows whether they start a secret).

use aho_corasick::{AhoCorasick, MatchKind};
use std::sync::Arc;

/// Values shorter than this are not masked (too likely to be ordinary text).
pub const MIN_MASKED_LEN: usize = 8;
pub const MASK: &[u8] = b"****";

/// The secret values of one box.
#[derive(Debug, Default)]
pub struct Masker {
    matcher: Option<AhoCorasick>,
    longest: usize,
}

impl Masker {
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let values: Vec<&str> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_MASKED_LEN)
            .collect();
        let longest = values.iter().map(|v| v.len()).max().unwrap_or(0);
        let matcher = if values.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&values)
                .ok()
        };
        Self { matcher, longest }
    }

    /// `text` with every secret value in it masked: for the strings boxd
    /// makes itself (a refusal, an endpoint failure, a command line), which a
    /// box may fill with what it was given.
    pub fn mask(&self, text: &str) -> String {
        let Some(matcher) = &self.matcher else {
            return text.to_owned();
        };
        let mut out = String::with_capacity(text.len());
        matcher.replace_all_with(text, &mut out, |_, _, dst| {
            dst.push_str("****");
            true
        });
        out
    }

    /// [`Masker::mask`] of each failure's reason (the address is one the
    /// user listed, not a value of theirs).
    pub fn mask_failures(&self, failures: &mut [psbx_wire::boxd::EndpointFailure]) {
        for failure in failures {
            failure.reason = self.mask(&failure.reason);
        }
    }

    /// [`Masker::mask`] of each string.
    pub fn mask_all(&self, texts: &mut [String]) {
        for text in texts {
            *text = self.mask(text);
        }
    }
}

/// Masking of one output stream, chunk by chunk.
pub struct MaskStream {
    masker: Arc<Masker>,
    pending: Vec<u8>,
}

impl MaskStream {
    pub fn new(masker: Arc<Masker>) -> Self {
        Self {
            masker,
            pending: Vec::new(),
        }
    }

    /// Masks what can be decided now; holds back a possible secret's start.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.masker.matcher else {
            return chunk.to_vec();
        };
        self.pending.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.pending);
        let mut safe_end = data.len().saturating_sub(self.masker.longest - 1);
        let mut out = Vec::with_capacity(data.len());
        let mut cursor = 0;
        for m in matcher.find_iter(&data) {
            if m.start() >= safe_end {
                break;
            }
            out.extend_from_slice(&data[cursor..m.start()]);
            out.extend_from_slice(MASK);
            cursor = m.end();
            safe_end = safe_end.max(cursor);
        }
        if cursor < safe_end {
            out.extend_from_slice(&data[cursor..safe_end]);
            cursor = safe_end;
        }
        self.pending = data[cursor..].to_vec();
        out
    }

    /// The end of the stream: masks and returns what was held back.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.pending);
        match &self.masker.matcher {
            Some(matcher) => {
                let mut out = Vec::with_capacity(rest.len());
                matcher.replace_all_with_bytes(&rest, &mut out, |_, _, dst| {
                    dst.extend_from_slice(MASK);
                    true
                });
                out
            }
            None => rest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(values: &[&str], chunks: &[&[u8]]) -> String {
        let mut s = MaskStream::new(Arc::new(Masker::new(values.iter().copied())));
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(s.push(chunk));
        }
        out.extend(s.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn masks_whole_strings() {
        let masker = Masker::new(["supersecret12", "short"]);
        assert_eq!(
            masker.mask("cd /x && echo supersecret12; short"),
            "cd /x && echo ****; short"
        );
        let mut texts = vec!["a supersecret12".to_owned(), "b".to_owned()];
        masker.mask_all(&mut texts);
        assert_eq!(texts, ["a ****", "b"]);
        assert_eq!(Masker::default().mask("supersecret12"), "supersecret12");
    }

    #[test]
    fn masks_values_of_eight_or_more_characters_only() {
        assert_eq!(
            stream(&["supersecret12"], &[b"token=supersecret12\n"]),
            "token=****\n"
        );
        assert_eq!(stream(&["seven77"], &[b"seven77\n"]), "seven77\n");
        assert_eq!(
            stream(&["eightchr"], &[b"xeightchrx eightchr"]),
            "x****x ****"
        );
    }

    #[test]
    fn masks_a_value_split_across_chunks_even_one_byte_at_a_time() {
        let secret = "abcdefghijkl";
        let text = format!("before {secret} after {secret}");
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(stream(&[secret], &bytes), "before **** after ****");
        for split in 1..text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(
                stream(&[secret], &[a, b]),
                "before **** after ****",
                "split at {split}"
            );
        }
    }

    #[test]
    fn prefers_the_longest_overlapping_value() {
        assert_eq!(
            stream(&["abcdefgh", "abcdefghijkl"], &[b"abcdefgh", b"ijkl!"]),
            "****!"
        );
        assert_eq!(
            stream(&["abcdefgh", "abcdefghijkl"], &[b"abcdefgh", b"ij"]),
            "****ij"
        );
    }

    #[test]
    fn passes_everything_through_without_secrets_and_holds_back_little() {
        assert_eq!(stream(&[], &[b"a", b"b"]), "ab");
        let mut s = MaskStream::new(Arc::new(Masker::new(["0123456789"])));
        assert_eq!(
            s.push(b"hello world, this is output\n"),
            b"hello world, this i".to_vec()
        );
        assert_eq!(s.finish(), b"s output\n".to_vec());
    }

    #[test]
    fn a_whole_text_is_masked() {
        let mut s = MaskStream::new(Arc::new(Masker::new(["password123"])));
        let mut out = s.push(b"password123 password12");
        out.extend(s.finish());
        assert_eq!(out, b"**** password12".to_vec());
    }
}

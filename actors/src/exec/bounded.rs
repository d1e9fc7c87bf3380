//! Output kept for a caller: at most a head and a tail of a stream, with a count
//! of what was cut in between, so a command printing gigabytes costs bounded
//! memory.

use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Bounded {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Bounded {
    pub fn new(head_cap: usize, tail_cap: usize) -> Self {
        Self {
            head_cap,
            tail_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes seen but not kept.
    pub fn cut(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// What was kept, with a marker where bytes were cut. Invalid UTF-8 (from a
    /// cut inside a character, or binary output) is replaced, not refused.
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let cut = self.cut();
        if cut > 0 {
            out.push_str(&format!(
                "\n[... {cut} bytes cut: {} bytes in all, the first {} and the last {} are shown ...]\n",
                self.total,
                self.head.len(),
                self.tail.len()
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = a.to_vec();
        tail.extend_from_slice(b);
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_that_fits() {
        let mut b = Bounded::new(10, 10);
        b.push(b"hello ");
        b.push(b"world");
        assert_eq!(b.render(), "hello world");
        assert_eq!((b.total(), b.cut()), (11, 0));
    }

    #[test]
    fn keeps_head_and_tail_and_says_what_was_cut() {
        let mut b = Bounded::new(4, 4);
        for chunk in [b"0123".as_slice(), b"456789", b"abcdefghij", b"XY"] {
            b.push(chunk);
        }
        assert_eq!(b.total(), 22);
        assert_eq!(b.cut(), 14);
        let text = b.render();
        assert!(
            text.starts_with("0123\n[... 14 bytes cut: 22 bytes in all"),
            "{text}"
        );
        assert!(text.ends_with("ijXY"), "{text}");
    }

    #[test]
    fn memory_stays_bounded_for_huge_output() {
        let mut b = Bounded::new(1024, 1024);
        let chunk = vec![b'x'; 65536];
        for _ in 0..1000 {
            b.push(&chunk);
        }
        assert_eq!(b.total(), 65_536_000);
        assert!(b.render().len() < 2200);
    }
}

//! The log of a child process under test: its lines, read off a pipe by a
//! thread of their own, and waits for a line to appear, from synchronous
//! tests ([`Log::wait_for_line`]) and from tokio tests
//! ([`Log::wait_for_count`]).

use crate::wait;
use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The lines a child wrote so far; cloning shares them.
#[derive(Clone, Default)]
pub struct Log {
    lines: Arc<Mutex<Vec<String>>>,
    reader: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Log {
    /// Reads `pipe` line by line until its end; each line is also printed on
    /// the test's stderr after `echo`, when given (as `[connector] line`).
    pub fn capture(pipe: impl Read + Send + 'static, echo: Option<&'static str>) -> Self {
        let log = Self::default();
        let lines = log.lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(prefix) = echo {
                    eprintln!("{prefix} {line}");
                }
                lines
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        *log.reader.lock().unwrap_or_else(PoisonError::into_inner) = Some(reader);
        log
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every line so far, each ended by a newline.
    pub fn text(&self) -> String {
        self.lines().iter().map(|l| format!("{l}\n")).collect()
    }

    /// The first line at index `from` or later that contains `needle`, with
    /// its index; the lines after it can be searched next. Panics with the
    /// log after `timeout`.
    pub fn wait_for_line(&self, from: usize, needle: &str, timeout: Duration) -> (usize, String) {
        let found = |lines: &[String]| {
            lines
                .iter()
                .enumerate()
                .skip(from)
                .find(|(_, l)| l.contains(needle))
                .map(|(i, l)| (i, l.clone()))
        };
        wait::within(timeout, || found(&self.lines())).unwrap_or_else(|| {
            panic!(
                "no log line with {needle:?} within {timeout:?}; log:\n{}",
                self.text()
            )
        })
    }

    /// Waits until the log holds `needle` `times` times. Panics with the log
    /// after `within`.
    pub async fn wait_for_count(&self, needle: &str, times: usize, within: Duration) {
        let seen = wait::within_async(within, async || {
            (self.text().matches(needle).count() >= times).then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "{needle:?} not logged {times} times within {within:?}; logs:\n{}",
            self.text()
        );
    }

    /// Waits (up to `timeout`) for the pipe's end, which comes when the child
    /// and everything it started have exited; returns whether it came.
    pub fn finish(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
            match reader.as_ref() {
                None => return true,
                Some(r) if r.is_finished() => {
                    if let Some(r) = reader.take() {
                        let _ = r.join();
                    }
                    return true;
                }
                Some(_) if std::time::Instant::now() >= deadline => return false,
                Some(_) => {}
            }
            drop(reader);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &[u8] = b"starting\nconnected to a\nidle\nconnected to b\n";

    fn finished() -> Log {
        let log = Log::capture(LINES, None);
        assert!(log.finish(Duration::from_secs(5)), "the reader never ended");
        log
    }

    #[test]
    fn lines_are_found_in_order_from_an_index() {
        let log = finished();
        let wait = Duration::from_secs(1);
        assert_eq!(
            log.wait_for_line(0, "connected", wait),
            (1, "connected to a".to_owned())
        );
        assert_eq!(
            log.wait_for_line(2, "connected", wait),
            (3, "connected to b".to_owned())
        );
        assert_eq!(log.text(), String::from_utf8_lossy(LINES));
    }

    #[test]
    #[should_panic(expected = "no log line with \"connected\" within")]
    fn a_line_past_the_last_one_is_not_found() {
        finished().wait_for_line(4, "connected", Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn counts_are_waited_for() {
        let log = finished();
        log.wait_for_count("connected to", 2, Duration::from_secs(1))
            .await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "\"connected to\" not logged 3 times")]
    async fn a_count_not_reached_fails() {
        let log = finished();
        log.wait_for_count("connected to", 3, Duration::from_secs(1))
            .await;
    }
}

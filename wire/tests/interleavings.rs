//! Property tests of the multiplexer: random interleavings of open, data,
//! reads (which grant credit), FIN and RST on both sides of a session pair,
//! over both carriages with random buffer sizes. Every byte arrives once and
//! in order, or the reader (or its own side) saw a reset; no session breaks
//! the protocol (a sender exceeding its credit would end the receiving
//! session); buffered bytes never exceed the memory budget; nothing hangs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use psbx_wire::mux::INITIAL_WINDOW;
use psbx_wire::{Config, OpenError, Session, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
enum Op {
    Open {
        from_a: bool,
        refuse: bool,
    },
    Write {
        stream: usize,
        from_a: bool,
        len: usize,
    },
    Read {
        stream: usize,
        by_a: bool,
        len: usize,
    },
    Fin {
        stream: usize,
        from_a: bool,
    },
    Reset {
        stream: usize,
        by_a: bool,
    },
    Yield(u8),
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..64, 64usize..20_000, 100_000usize..700_000]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), prop::bool::weighted(0.15)).prop_map(|(from_a, refuse)| Op::Open { from_a, refuse }),
        6 => (0usize..16, any::<bool>(), len()).prop_map(|(stream, from_a, len)| Op::Write { stream, from_a, len }),
        6 => (0usize..16, any::<bool>(), len()).prop_map(|(stream, by_a, len)| Op::Read { stream, by_a, len }),
        2 => (0usize..16, any::<bool>()).prop_map(|(stream, from_a)| Op::Fin { stream, from_a }),
        1 => (0usize..16, any::<bool>()).prop_map(|(stream, by_a)| Op::Reset { stream, by_a }),
        2 => (1u8..20).prop_map(Op::Yield),
    ]
}

/// What one end of a stream is told to do.
#[derive(Debug)]
enum Cmd {
    Write(usize),
    Read(usize),
    Fin,
    Reset,
}

/// What one end of a stream did.
#[derive(Debug, Default)]
struct Report {
    sent: usize,
    received: usize,
    fin_sent: bool,
    eof: bool,
    read_error: Option<ErrorKind>,
    reset_here: bool,
    corrupt_at: Option<usize>,
}

/// Runs one end: writes its pattern, reads and checks the peer's, obeys
/// commands; once the commands end it finishes its writes, sends FIN and
/// reads to the end.
async fn run_end(
    stream: Stream,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    out_seed: u64,
    in_seed: u64,
) -> Report {
    let (mut r, mut w) = stream.into_split();
    let mut report = Report::default();
    let (mut to_write, mut to_read) = (0usize, 0usize);
    let (mut fin_wanted, mut closing, mut read_done, mut write_done) = (false, false, false, false);
    let mut out = vec![0u8; 32 * 1024];
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        if !write_done && to_write == 0 && (fin_wanted || closing) {
            match w.shutdown().await {
                Ok(()) => report.fin_sent = true,
                Err(e) => assert!(
                    matches!(e.kind(), ErrorKind::ConnectionReset),
                    "shutdown: {e}"
                ),
            }
            write_done = true;
            continue;
        }
        let want_write = !write_done && to_write > 0;
        let want_read = !read_done && (to_read > 0 || closing);
        if closing && !want_write && !want_read {
            break;
        }
        let chunk = to_write.min(out.len());
        for (i, byte) in out[..chunk].iter_mut().enumerate() {
            *byte = pattern(out_seed, report.sent + i);
        }
        let read_len = if closing {
            buf.len()
        } else {
            to_read.clamp(1, buf.len())
        };
        tokio::select! {
            cmd = cmds.recv(), if !closing => match cmd {
                Some(Cmd::Write(n)) => to_write += n,
                Some(Cmd::Read(n)) => to_read += n,
                Some(Cmd::Fin) => fin_wanted = true,
                Some(Cmd::Reset) => {
                    if !(read_done && write_done) {
                        w.reset("reset by the test");
                        report.reset_here = true;
                    }
                    read_done = true;
                    write_done = true;
                }
                None => closing = true,
            },
            res = w.write(&out[..chunk]), if want_write => match res {
                Ok(n) => {
                    assert!(n > 0);
                    report.sent += n;
                    to_write -= n;
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "write: {e}");
                    write_done = true;
                }
            },
            res = r.read(&mut buf[..read_len]), if want_read => match res {
                Ok(0) => {
                    report.eof = true;
                    read_done = true;
                }
                Ok(n) => {
                    for (i, byte) in buf[..n].iter().enumerate() {
                        if *byte != pattern(in_seed, report.received + i) && report.corrupt_at.is_none() {
                            report.corrupt_at = Some(report.received + i);
                        }
                    }
                    report.received += n;
                    to_read = to_read.saturating_sub(n);
                }
                Err(e) => {
                    report.read_error = Some(e.kind());
                    read_done = true;
                }
            },
        }
    }
    report
}

struct Pair {
    a: mpsc::UnboundedSender<Cmd>,
    b: mpsc::UnboundedSender<Cmd>,
    a_end: tokio::task::JoinHandle<Report>,
    b_end: tokio::task::JoinHandle<Report>,
}

/// Accepts every incoming stream on `session` (refusing the target
/// `refuse`) and hands it over.
fn accept_loop(session: Session) -> mpsc::UnboundedReceiver<Stream> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(incoming) = session.accept().await {
            if incoming.target() == "refuse" {
                incoming.refuse(502, "refused by the test");
            } else if tx.send(incoming.accept()).is_err() {
                break;
            }
        }
    });
    rx
}

fn config() -> Config {
    Config {
        max_streams: 6,
        max_window: 1024 * 1024,
        memory_budget: 6 * INITIAL_WINDOW as usize + 512 * 1024,
        send_queue: 64 * 1024,
        ..Config::default()
    }
}

fn check_budget(session: &Session, budget: usize) {
    let stats = session.stats();
    assert!(stats.buffered <= stats.committed, "{stats:?}");
    assert!(stats.committed <= budget, "{stats:?}");
}

async fn run_case(ops: Vec<Op>, over_messages: bool, capacity: usize) {
    let budget = config().memory_budget;
    let (a, b) = if over_messages {
        pair_over_messages(config(), config(), capacity / 4096 + 1).await
    } else {
        pair_over_io(config(), config(), capacity).await
    };
    let mut accepted_by_a = accept_loop(a.clone());
    let mut accepted_by_b = accept_loop(b.clone());
    let mut pairs: Vec<Option<Pair>> = Vec::new();
    for op in ops {
        match op {
            Op::Open { from_a, refuse } => {
                let index = pairs.len();
                let target = if refuse {
                    "refuse".to_owned()
                } else {
                    format!("s{index}")
                };
                let (opener, accepted) = if from_a {
                    (&a, &mut accepted_by_b)
                } else {
                    (&b, &mut accepted_by_a)
                };
                match opener.open(&target).await {
                    Ok(opened) => {
                        let other = accepted.recv().await.expect("the accepted stream");
                        assert_eq!(other.target(), target);
                        let (on_a, on_b) = if from_a {
                            (opened, other)
                        } else {
                            (other, opened)
                        };
                        let (seed_a, seed_b) = (2 * index as u64, 2 * index as u64 + 1);
                        let (a_tx, a_rx) = mpsc::unbounded_channel();
                        let (b_tx, b_rx) = mpsc::unbounded_channel();
                        pairs.push(Some(Pair {
                            a: a_tx,
                            b: b_tx,
                            a_end: tokio::spawn(run_end(on_a, a_rx, seed_a, seed_b)),
                            b_end: tokio::spawn(run_end(on_b, b_rx, seed_b, seed_a)),
                        }));
                    }
                    Err(OpenError::Refused { code: 502, .. }) if refuse => pairs.push(None),
                    Err(OpenError::Refused { code: 429, .. })
                    | Err(OpenError::TooManyStreams(_)) => pairs.push(None),
                    Err(e) => panic!("open {target}: {e}"),
                }
            }
            Op::Write {
                stream,
                from_a,
                len,
            } => send(&pairs, stream, from_a, Cmd::Write(len)),
            Op::Read { stream, by_a, len } => send(&pairs, stream, by_a, Cmd::Read(len)),
            Op::Fin { stream, from_a } => send(&pairs, stream, from_a, Cmd::Fin),
            Op::Reset { stream, by_a } => send(&pairs, stream, by_a, Cmd::Reset),
            Op::Yield(n) => {
                for _ in 0..n {
                    tokio::task::yield_now().await;
                }
            }
        }
        tokio::task::yield_now().await;
        check_budget(&a, budget);
        check_budget(&b, budget);
    }
    // Let every end finish: the commands end, writes complete, FINs go out,
    // readers read to the end.
    let mut ends = Vec::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        if let Some(Pair { a, b, a_end, b_end }) = pair {
            drop((a, b));
            ends.push((index, a_end, b_end));
        }
    }
    let budget_watch = async {
        loop {
            check_budget(&a, budget);
            check_budget(&b, budget);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let finish = async {
        let mut reports = Vec::new();
        for (index, a_end, b_end) in ends {
            reports.push((
                index,
                a_end.await.expect("end a"),
                b_end.await.expect("end b"),
            ));
        }
        reports
    };
    let reports = tokio::select! {
        reports = tokio::time::timeout(Duration::from_secs(60), finish) => reports.expect("every stream finished"),
        () = budget_watch => unreachable!(),
    };
    for (index, on_a, on_b) in &reports {
        check_direction(*index, "a->b", on_a, on_b);
        check_direction(*index, "b->a", on_b, on_a);
    }
    assert!(
        !a.is_closed(),
        "session a ended: {:?}",
        tokio::time::timeout(Duration::ZERO, a.closed()).await
    );
    assert!(
        !b.is_closed(),
        "session b ended: {:?}",
        tokio::time::timeout(Duration::ZERO, b.closed()).await
    );
    // Every stream is gone on both sides, with its memory.
    tokio::time::timeout(Duration::from_secs(10), async {
        while a.stats().streams + b.stats().streams > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("streams removed");
    for s in [&a, &b] {
        let stats = s.stats();
        assert_eq!((stats.buffered, stats.committed), (0, 0), "{stats:?}");
    }
}

fn send(pairs: &[Option<Pair>], stream: usize, to_a: bool, cmd: Cmd) {
    if pairs.is_empty() {
        return;
    }
    if let Some(pair) = &pairs[stream % pairs.len()] {
        // An end that finished after a reset no longer listens.
        let _ = if to_a {
            pair.a.send(cmd)
        } else {
            pair.b.send(cmd)
        };
    }
}

fn check_direction(index: usize, way: &str, writer: &Report, reader: &Report) {
    let what = format!("stream {index} {way}: writer {writer:?}, reader {reader:?}");
    assert_eq!(
        reader.corrupt_at, None,
        "bytes changed, lost, duplicated or reordered: {what}"
    );
    assert!(
        reader.received <= writer.sent,
        "more arrived than was sent: {what}"
    );
    let reset = writer.reset_here || reader.reset_here;
    if !reset {
        assert_eq!(
            reader.received, writer.sent,
            "bytes lost without a reset: {what}"
        );
        assert!(
            writer.fin_sent && reader.eof,
            "no clean end without a reset: {what}"
        );
        assert_eq!(reader.read_error, None, "{what}");
    }
    if reader.received < writer.sent {
        let told = reader.reset_here
            || matches!(
                reader.read_error,
                Some(ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted)
            );
        assert!(told, "bytes lost and the reader was not told: {what}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_byte_arrives_once_in_order_or_a_reset_is_reported(
        ops in prop::collection::vec(op(), 1..60),
        over_messages in any::<bool>(),
        capacity in 512usize..256 * 1024,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(run_case(ops, over_messages, capacity));
    }
}

/// A fixed case that exercises every operation, so that a failure here is
/// easy to read.
#[tokio::test]
async fn a_known_interleaving_works() {
    let ops = vec![
        Op::Open {
            from_a: true,
            refuse: false,
        },
        Op::Open {
            from_a: false,
            refuse: false,
        },
        Op::Open {
            from_a: true,
            refuse: true,
        },
        Op::Write {
            stream: 0,
            from_a: true,
            len: 600_000,
        },
        Op::Write {
            stream: 1,
            from_a: true,
            len: 10,
        },
        Op::Read {
            stream: 0,
            by_a: false,
            len: 100_000,
        },
        Op::Write {
            stream: 1,
            from_a: false,
            len: 300_000,
        },
        Op::Fin {
            stream: 1,
            from_a: true,
        },
        Op::Reset {
            stream: 3,
            by_a: false,
        },
        Op::Open {
            from_a: false,
            refuse: false,
        },
        Op::Write {
            stream: 3,
            from_a: false,
            len: 50_000,
        },
        Op::Reset {
            stream: 3,
            by_a: true,
        },
        Op::Yield(10),
    ];
    run_case(ops, false, 4096).await;
}

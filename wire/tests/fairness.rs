//! No head-of-line blocking: a stream nobody reads holds only its own window,
//! while another stream of the same session moves a large transfer through
//! to its end, both ways of the session; the stalled one then still gets
//! every byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_wire::testing::session_pair;
use psbx_wire::{Config, Session, Stream};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const LONG: Duration = Duration::from_secs(60);

async fn connected(a: &Session, b: &Session, target: &str) -> (Stream, Stream) {
    let accept = async { b.accept().await.expect("incoming").accept() };
    let (opened, accepted) = tokio::join!(a.open(target), accept);
    (opened.expect("open"), accepted)
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_does_not_hold_up_another_of_the_same_session() {
    let (a, b) = session_pair(Config::default(), Config::default(), 64 * 1024)
        .await
        .unwrap();
    // The slow one: 8 MiB written, nobody reading on the other side.
    let (mut slow_tx, mut slow_rx) = connected(&a, &b, "slow").await;
    let slow_data = bytes(1, 8 << 20);
    let slow_sent = slow_data.clone();
    let slow_writer = tokio::spawn(async move {
        slow_tx.write_all(&slow_sent).await.unwrap();
        slow_tx.shutdown().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !slow_writer.is_finished(),
        "the window did not hold the slow writer"
    );

    // The fast one, at full speed beside it: 32 MiB through to the end.
    let (mut fast_tx, mut fast_rx) = connected(&a, &b, "fast").await;
    let fast_data = bytes(2, 32 << 20);
    let fast_sent = fast_data.clone();
    let fast_writer = tokio::spawn(async move {
        fast_tx.write_all(&fast_sent).await.unwrap();
        fast_tx.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    timeout(LONG, fast_rx.read_to_end(&mut got))
        .await
        .expect("the fast stream was held up behind the stalled one")
        .unwrap();
    assert!(got == fast_data, "the fast stream's bytes differ");
    fast_writer.await.unwrap();
    assert!(
        !slow_writer.is_finished(),
        "the slow stream was read by nobody"
    );

    // The stalled stream still gets everything once read.
    let mut got = Vec::new();
    timeout(LONG, slow_rx.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == slow_data, "the slow stream's bytes differ");
    slow_writer.await.unwrap();
}

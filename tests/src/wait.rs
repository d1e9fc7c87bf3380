//! Waiting for a condition with a deadline: [`until`] polls a check from a
//! synchronous test, [`until_async`] from a tokio test (on tokio's clock, so
//! a paused clock moves on while it waits). Both panic with what they waited
//! for once the deadline has passed; [`within`] and [`within_async`] return
//! None instead, for callers that say more when they panic.

use std::time::Duration;

/// How often [`until`] checks: its checks may be costly (a `virsh` call).
const SYNC_EVERY: Duration = Duration::from_millis(200);
/// How often [`until_async`] checks (a tenth of a second of a paused clock
/// costs nothing, but each check may query the database).
const ASYNC_EVERY: Duration = Duration::from_millis(100);

/// Polls `check` every 200 ms until it returns Some, or panics after `timeout`.
pub fn until<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    within(timeout, check)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `check` every 200 ms until it returns Some (that value), or until
/// `timeout` has passed (None).
pub fn within<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(SYNC_EVERY);
    }
}

/// [`until`] for async checks, polled every 100 ms of tokio's clock.
pub async fn until_async<T>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    within_async(timeout, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// [`within`] for async checks, polled every 100 ms of tokio's clock.
pub async fn within_async<T>(
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(ASYNC_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_the_first_value() {
        let mut calls = 0;
        let v = until("the third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "timed out after 10ms waiting for nothing")]
    fn until_panics_at_the_deadline() {
        until("nothing", Duration::from_millis(10), || None::<()>);
    }

    #[tokio::test(start_paused = true)]
    async fn until_async_waits_on_tokios_clock() {
        let start = tokio::time::Instant::now();
        let v = until_async("a minute", Duration::from_secs(120), async || {
            (start.elapsed() >= Duration::from_secs(60)).then_some(7)
        })
        .await;
        assert_eq!(v, 7);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting for nothing")]
    async fn until_async_panics_at_the_deadline() {
        until_async("nothing", Duration::from_secs(1), async || None::<()>).await;
    }
}

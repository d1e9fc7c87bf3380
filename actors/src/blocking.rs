//! Running a blocking call (the store, libvirt, the file system) off the
//! async threads: one helper for the actors and the server, returning the
//! call's own error type.

/// The thread running a blocking call panicked, or the runtime shut down
/// before it ran.
#[derive(Debug, thiserror::Error)]
#[error("a blocking task failed")]
pub struct TaskFailed(#[from] tokio::task::JoinError);

/// Runs `f` on tokio's blocking pool. Its error type says what a failed task
/// is (`E: From<TaskFailed>`), so callers get their own error back and `?`
/// converts it as usual.
pub async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<TaskFailed> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(TaskFailed(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Failure {
        #[error("refused")]
        Refused,
        #[error(transparent)]
        Task(#[from] TaskFailed),
    }

    #[tokio::test]
    async fn the_call_s_own_error_and_a_panic_come_back_as_the_caller_s_error() {
        let ok: Result<u32, Failure> = blocking(|| Ok(7)).await;
        assert_eq!(ok.unwrap(), 7);
        let refused: Result<(), Failure> = blocking(|| Err(Failure::Refused)).await;
        assert!(matches!(refused, Err(Failure::Refused)));
        #[allow(clippy::panic)]
        let panicked: Result<(), Failure> = blocking(|| panic!("boom")).await;
        match panicked {
            Err(Failure::Task(TaskFailed(e))) => assert!(e.is_panic()),
            other => panic!("{other:?}"),
        }
    }
}

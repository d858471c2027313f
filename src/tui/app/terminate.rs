//! The dashboard's way out on SIGTERM: the same clean quit as `q`, the terminal restored.

/// Resolves on SIGTERM (or never, where there is none): quit cleanly, restoring the terminal.
pub(super) fn sigterm() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    #[cfg(unix)]
    {
        if let Ok(mut signal) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            return Box::pin(async move {
                signal.recv().await;
            });
        }
    }
    Box::pin(std::future::pending())
}

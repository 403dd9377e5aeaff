//! The HTTP/1.1 server loop of `switchboard serve`: hyper with a timer, so that a client that
//! opens a connection and never finishes its request headers is cut off after `header_timeout`
//! (axum's own `serve` runs hyper without a timer, where that timeout cannot fire). Body
//! timeouts and size limits are the API's (`switchboard_api`), not this loop's.

use std::future::Future;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long open connections may take to finish after shutdown is asked for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to pause after `accept` failed with `e`: nothing for an error of the one connection
/// (it was reset or aborted before it was taken), a second for an error of the listener or the
/// process (`EMFILE`, `ENFILE`, `ENOMEM`), which the next `accept` would hit again at once.
fn accept_backoff(e: &std::io::Error) -> Option<Duration> {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    match e.kind() {
        ConnectionAborted | ConnectionRefused | ConnectionReset => None,
        _ => Some(Duration::from_secs(1)),
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets open connections finish their
/// current request (for at most ten seconds).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if let Some(pause) = accept_backoff(&e) {
                        // Out of file descriptors and the like: accepting again at once would
                        // spin on the same error; pause (as axum's own loop does), still
                        // listening for shutdown.
                        tracing::warn!(error = %e, pause_ms = pause.as_millis(), "accepting a connection failed; pausing");
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = app.clone().map_request(|req: hyper::Request<Incoming>| req.map(axum::body::Body::new));
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // An event stream never ends by itself: give open requests a bounded time to finish.
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::info!("connections still open after {} s; closing them", DRAIN_TIMEOUT.as_secs());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_descriptors_pauses_the_loop_and_a_dropped_connection_does_not() {
        let emfile = std::io::Error::from_raw_os_error(24);
        assert_eq!(accept_backoff(&emfile), Some(Duration::from_secs(1)), "{emfile}");
        let enfile = std::io::Error::from_raw_os_error(23);
        assert_eq!(accept_backoff(&enfile), Some(Duration::from_secs(1)), "{enfile}");
        let aborted = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert_eq!(accept_backoff(&aborted), None);
        assert_eq!(accept_backoff(&std::io::Error::from(std::io::ErrorKind::ConnectionReset)), None);
    }
}

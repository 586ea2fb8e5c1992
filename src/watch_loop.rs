//! `signalql watch`: poll a WATCH statement every interval, print one JSON line per alert, and
//! stop on Ctrl-C or after a number of polls.

use crate::{Engine, Error, Result};

/// The loop: a poll, then a sleep that Ctrl-C ends, until `max_polls`. Each poll's outcome
/// goes to stderr (`poll N: true`), each alert to stdout as `{"alert": …}`. The first poll
/// failing is an error (the statement is wrong); later failures are reported on stderr and
/// the loop goes on.
pub fn watch(engine: &Engine, text: &str, interval: f64, max_polls: Option<u64>) -> Result<()> {
    let (w, pause) = watch_request(
        text,
        interval,
        "signalql watch runs a WATCH (query) WHEN condition statement",
        "--interval",
    )?;
    let rt = crate::runtime()?;
    let mut watcher = crate::watch::Watcher::new(w);
    rt.block_on(async {
        let mut interrupt = Interrupt::new()?;
        loop {
            match watcher.poll(engine).await {
                Ok(p) => {
                    eprintln!(
                        "poll {}: {}",
                        p.poll,
                        if p.holds { "true" } else { "false" }
                    );
                    if let Some(alert) = p.alert {
                        let line = serde_json::to_string(&serde_json::json!({ "alert": alert }))
                            .map_err(|e| Error::internal(e.to_string()))?;
                        crate::stdout::write(&format!("{line}\n"))?;
                    }
                }
                Err(e) if watcher.polls() == 0 => return Err(e),
                Err(e) => eprintln!("poll failed: {e}"),
            }
            if max_polls.is_some_and(|m| watcher.polls() >= m) {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = interrupt.recv() => return Ok(()),
            }
        }
    })
}

/// `text` parsed as a WATCH statement, and `seconds` as the pause between its polls: what
/// `signalql watch` and the MCP `watch` tool both check. Errors are `type_error`s:
/// `not_watch` for another statement, and one naming `interval` (the caller's setting) for a
/// pause that is negative or not a number.
pub(crate) fn watch_request(
    text: &str,
    seconds: f64,
    not_watch: &str,
    interval: &str,
) -> Result<(crate::ast::WatchQuery, std::time::Duration)> {
    let crate::ast::Statement::Watch(w) = crate::parse(text)? else {
        return Err(Error::type_error(not_watch));
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(Error::type_error(format!(
            "{interval} must be a non-negative number of seconds"
        )));
    }
    Ok((w, std::time::Duration::from_secs_f64(seconds)))
}

/// Ctrl-C, listened for from creation on (so a SIGINT during the first poll is not lost).
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn new() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signal = signal(SignalKind::interrupt())
                .map_err(|e| Error::io(format!("cannot listen for Ctrl-C: {e}")))?;
            Ok(Interrupt { signal })
        }
        #[cfg(not(unix))]
        Ok(Interrupt {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

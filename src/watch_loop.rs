//! `signalql watch`: poll a WATCH statement every interval, print one JSON line per alert, and
//! stop on Ctrl-C or after a number of polls.

use crate::{Engine, Error, Result};

/// The loop: a poll, then a sleep that Ctrl-C ends, until `max_polls`. Each poll's outcome
/// goes to stderr (`poll N: true`), each alert to stdout as `{"alert": …}`. The first poll
/// failing is an error (the statement is wrong); later failures are reported on stderr and
/// the loop goes on.
pub fn watch(engine: &Engine, text: &str, interval: f64, max_polls: Option<u64>) -> Result<()> {
    let statement = crate::parse(text)?;
    let crate::ast::Statement::Watch(w) = statement else {
        return Err(Error::type_error(
            "signalql watch runs a WATCH (query) WHEN condition statement",
        ));
    };
    if !interval.is_finite() || interval < 0.0 {
        return Err(Error::type_error(
            "--interval must be a non-negative number of seconds",
        ));
    }
    let pause = std::time::Duration::from_secs_f64(interval);
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

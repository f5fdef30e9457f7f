//! Ctrl-C (and SIGTERM) for the interactive commands: the first signal
//! cancels what runs, so the run's tape is merged and the session's shells
//! are stopped by the scope's exit; a second one within 3 s ends bub at
//! once (exit 130), once the commands the turn started are gone (TERM, then
//! KILL after 3 s).
//!
//! The signals are watched on a thread of their own, so that a plugin
//! blocking the command's runtime thread (a hanging sync hook) cannot hold
//! them up.

use std::sync::Arc;

use anyhow::Result;
use tokio::sync::Notify;

/// Starts the watcher of SIGINT (and of SIGTERM when `term`); the returned
/// notify fires on each first signal.
pub fn watch(term: bool) -> Result<Arc<Notify>> {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupted = Arc::new(Notify::new());
    let notify = interrupted.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("bub-sigint".into()).spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async move {
            let mut sigint = match signal(SignalKind::interrupt()) {
                Ok(s) => s,
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let mut sigterm = match term.then(|| signal(SignalKind::terminate())).transpose() {
                Ok(s) => s,
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let _ = ready_tx.send(Ok(()));
            let mut last: Option<std::time::Instant> = None;
            loop {
                let term = async {
                    match &mut sigterm {
                        Some(s) => s.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    s = sigint.recv() => if s.is_none() { break },
                    s = term => if s.is_none() { break },
                }
                if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(3)) {
                    eprintln!("^C again: bub exits now");
                    // Not before what the turn started is gone: a command
                    // that ignores SIGTERM would outlive bub as an orphan.
                    let ended = bub_builtin::shells::end_all_groups(std::time::Duration::from_secs(3));
                    if ended > 0 {
                        eprintln!("stopped {ended} command(s) the turn had started");
                    }
                    bub_host::crash::disarm();
                    std::process::exit(130);
                }
                last = Some(std::time::Instant::now());
                notify.notify_waiters();
            }
        })
    })?;
    ready_rx.recv().map_err(|_| anyhow::anyhow!("the Ctrl-C watcher did not start"))??;
    Ok(interrupted)
}

/// After Ctrl-C cancelled a turn: says so, then waits (at most 10 s) until
/// the cancelled run has recorded its `loop.finish` and merged its tape,
/// which it does in the background: what follows (another turn, the
/// scope's exit, the runtime's end) must not come before that.
pub async fn turn_cancelled() {
    eprintln!("^C turn cancelled");
    if !bub_host::agent::run::settled(std::time::Duration::from_secs(10)).await {
        eprintln!("the cancelled run did not finish recording within 10 s");
    }
}

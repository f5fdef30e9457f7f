//! A `bub gateway` child process with `http-channel` plugins, for the
//! gateway tests and the load test.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::bub_bin;

/// A running `bub gateway`; killed when dropped.
pub struct GatewayProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl GatewayProcess {
    /// Starts `bub --home <home> gateway <args>` with `env`, logging to
    /// `<home>/gateway.log`. The http channels write their address into
    /// their data folders; [`address`](Self::address) waits for it.
    pub fn start(home: &Path, args: &[&str], env: &[(&str, &str)]) -> GatewayProcess {
        GatewayProcess::start_bin(&bub_bin(), home, args, env)
    }

    /// As [`start`](Self::start), with another `bub` binary (a release one).
    pub fn start_bin(bin: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> GatewayProcess {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = home.join(format!("gateway-{n}.log"));
        let file = std::fs::File::create(&log).expect("gateway log");
        let mut cmd = Command::new(bin);
        cmd.arg("--home").arg(home).arg("-v").arg("gateway").args(args);
        cmd.env("BUB_HOME", home).env_remove("BUB_PLUGIN_PATH").env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child =
            cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).spawn().expect("start bub gateway");
        GatewayProcess { child: Some(child), log }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `http://host:port` of the http channel installed as `plugin`, once it
    /// listens (a fresh address file, written after this process started).
    pub fn address(&mut self, home: &Path, plugin: &str) -> String {
        let file = home.join("data").join(plugin).join("address");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                if !text.trim().is_empty() && self.log().contains("started listening") {
                    return format!("http://{}", text.trim());
                }
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("bub gateway exited ({status}) before listening:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "bub gateway did not listen within 60 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its resident memory now, in kB (`VmRSS`).
    pub fn rss_kb(&self) -> u64 {
        let pid = self.pid().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `limit` until its log says `text`; fails the test with
    /// `what` and the log otherwise.
    pub fn wait_for_log(&self, text: &str, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        while !self.log().contains(text) {
            assert!(Instant::now() < deadline, "{what}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (e.g. `libc`'s SIGTERM number) to it.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args(["-s", signal, &pid]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits up to `limit` for it to exit; its status, or None (then it is killed).
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

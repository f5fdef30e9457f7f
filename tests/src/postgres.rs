//! A throw-away PostgreSQL server for the scale-out tests: `initdb` into a
//! temporary folder, `postgres` on a free loopback port, killed and removed
//! when dropped. Run as `nobody` when the tests run as root (PostgreSQL
//! refuses root, and CI runs as root).

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A running server.
pub struct Postgres {
    child: Child,
    port: u16,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    _dir: tempfile::TempDir,
}

/// Where the server binaries are: `$PATH`, else Debian's
/// `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file());
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> =
            std::fs::read_dir("/usr/lib/postgresql").ok()?.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        versions.into_iter().rev().find(|d| d.join("initdb").is_file())
    })
}

/// uid and gid of `nobody`, when this process is root.
fn unprivileged() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let line = passwd.lines().find(|l| l.starts_with("nobody:"))?;
    let mut f = line.split(':').skip(2);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

impl Postgres {
    /// Starts one; `Err` says why not (no server binaries: the caller
    /// skips with that message).
    pub fn start() -> Result<Postgres, String> {
        let bin =
            bin_dir().ok_or("no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql")?;
        let dir = tempfile::Builder::new().prefix("bub-pg-").tempdir().map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        let user = unprivileged();
        if let Some((uid, gid)) = user {
            let owner = (Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)));
            rustix::fs::chown(dir.path(), owner.0, owner.1).map_err(|e| format!("chown: {e}"))?;
        }
        let out = command(&bin, user, "initdb")
            .args(["-U", "bub", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
        let child = spawn(&bin, user, dir.path(), port)?;
        let mut server = Postgres { child, port, bin, user, _dir: dir };
        server.wait_ready()?;
        Ok(server)
    }

    /// Stops the server (fast shutdown: clients are disconnected) and
    /// starts it again on the same port and data: a restart or failover.
    pub fn restart(&mut self) -> Result<(), String> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).ok_or("no pid")?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        let _ = self.child.wait();
        self.child = spawn(&self.bin, self.user, self._dir.path(), self.port)?;
        self.wait_ready()
    }

    /// Freezes every process of the server (SIGSTOP to the postmaster and
    /// its children, each in a session of its own): connections stay open
    /// and nothing answers.
    pub fn freeze(&self) {
        self.signal_all(rustix::process::Signal::STOP);
    }

    /// Undoes [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal_all(rustix::process::Signal::CONT);
    }

    fn signal_all(&self, signal: rustix::process::Signal) {
        let main = self.child.id();
        let children = std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|p| {
            let pid: u32 = p.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(p.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces.
            let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == main).then_some(pid)
        });
        for pid in std::iter::once(main).chain(children.collect::<Vec<_>>()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("postgres exited ({status}): {}", self.log()));
            }
            let ready = Command::new("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "bub", "-d", "postgres"])
                .status();
            match ready {
                Ok(s) if s.success() => return Ok(()),
                // Without pg_isready: the port answering is close enough,
                // the plugins retry nothing but the first turn waits anyway.
                Err(_) if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() => {
                    std::thread::sleep(Duration::from_millis(500));
                    return Ok(());
                }
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(format!("postgres did not become ready in 60 s: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("server.log")).unwrap_or_default()
    }

    fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// A connection URL for database `postgres` as user `bub`.
    pub fn url(&self) -> String {
        format!("postgres://bub@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs SQL with `psql` (when installed): its output, rows unaligned, `|`-separated.
    pub fn psql(&self, sql: &str) -> Option<String> {
        let out =
            Command::new("psql").args(["-X", "-A", "-t", "-F", "|", "-d", &self.url(), "-c", sql]).output().ok()?;
        assert!(out.status.success(), "psql failed: {}", String::from_utf8_lossy(&out.stderr));
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // A frozen server's children would hold on to the data folder.
        self.signal_all(rustix::process::Signal::CONT);
        self.signal_all(rustix::process::Signal::KILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(bin: &Path, user: Option<(u32, u32)>, program: &str) -> Command {
    let mut cmd = Command::new(bin.join(program));
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGDATA").env("LC_ALL", "C");
    cmd
}

/// Starts `postgres` on `port` over `<dir>/data`, in a process group of its
/// own (so the tests can freeze the whole server), logging to `<dir>/server.log`.
fn spawn(bin: &Path, user: Option<(u32, u32)>, dir: &Path, port: u16) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .map_err(|e| e.to_string())?;
    command(bin, user, "postgres")
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .arg("-k")
        .arg(dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))
}

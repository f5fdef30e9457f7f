//! `bub gateway --install / --uninstall / --status`: the gateway as a
//! per-user systemd service, as Bub's `gateway_installer.py` makes it.
//!
//! `--install` writes `bub-gateway.service` to
//! `$XDG_CONFIG_HOME/systemd/user/` (default `~/.config/systemd/user/`):
//! `bub --home H --workspace W gateway --enable-channel …` with the
//! workspace as working directory (so its `.env` is read, as for `bub`
//! run there), `Restart=on-failure`, a stop timeout longer than the
//! gateway's grace period, and `EnvironmentFile=$BUB_HOME/gateway.env`:
//! the `BUB_*`, `*_API_KEY` and proxy variables of the installing shell
//! (not those of the `.env`), written owner-only, since a token in the unit
//! file itself would be readable by every local user. With `systemctl`
//! (and a user manager) the unit is enabled and (re)started; without, the
//! commands to run are printed. `--uninstall` stops, disables and removes
//! both files. `--status` tells what is installed and which gateways of
//! this home run (their journal locks say so, systemd or not).
//!
//! Differences from Bub: Bub's unit has no environment file (its Python
//! process reads the workspace's `.env` only) and Bub fails without
//! `systemctl`; here the unit is still written and the steps printed.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

/// The unit's file name (Bub's).
pub const UNIT: &str = "bub-gateway.service";

/// Where the user's units live.
pub fn unit_path() -> Result<PathBuf> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").context("neither XDG_CONFIG_HOME nor HOME is set")?;
            PathBuf::from(home).join(".config")
        }
    };
    Ok(config.join("systemd").join("user").join(UNIT))
}

/// One word of `ExecStart=` (systemd.service "Command lines"): quoted,
/// with C escapes for `"` and `\`, specifiers (`%`) doubled and `$`
/// doubled (systemd expands `$NAME` in command lines).
fn exec_word(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%").replace('$', "$$");
    format!("\"{escaped}\"")
}

/// What no unit file can say: control characters (a newline ends the
/// setting), whitespace at either end (systemd strips it), a path that is
/// not absolute or not UTF-8.
fn unit_path_text(path: &Path, what: &str) -> Result<String> {
    let Some(text) = path.to_str() else {
        bail!("the {what} {} is not valid UTF-8, which a systemd unit cannot name; use another folder", path.display())
    };
    if !path.is_absolute() {
        bail!("the {what} {text:?} is not an absolute path; systemd needs one");
    }
    if text.chars().any(char::is_control) || text.trim() != text {
        bail!(
            "the {what} {text:?} has a control character or whitespace at an end, which a systemd unit cannot \
             name; use another folder"
        );
    }
    Ok(text.to_owned())
}

/// A setting that takes one path (`WorkingDirectory=`, `EnvironmentFile=`):
/// the rest of the line, unquoted (systemd reads quotes as part of the
/// path), specifiers (`%`) doubled.
fn path_value(path: &Path, what: &str) -> Result<String> {
    Ok(unit_path_text(path, what)?.replace('%', "%%"))
}

/// What the service runs.
pub struct Service<'a> {
    /// The `bub` binary.
    pub executable: &'a Path,
    /// `$BUB_HOME`.
    pub home: &'a Path,
    /// The workspace (working directory).
    pub workspace: &'a Path,
    /// `--enable-channel` values.
    pub channels: &'a [String],
    /// The gateway's grace period.
    pub grace: std::time::Duration,
}

impl Service<'_> {
    /// The environment file's path.
    pub fn env_file(&self) -> PathBuf {
        self.home.join("gateway.env")
    }

    /// The unit file's text, or why no unit can name these paths. Every
    /// setting is written as systemd.syntax and systemd.exec read it;
    /// `systemd-analyze verify` accepts the result.
    pub fn unit(&self) -> Result<String> {
        let executable = unit_path_text(self.executable, "bub binary")?;
        // systemd refuses an executable whose name has quotes or backslashes.
        if executable.contains(['"', '\'', '\\']) {
            bail!(
                "the bub binary's path {executable:?} has a quote or a backslash, which systemd refuses in an \
                 executable's name; install bub elsewhere (e.g. ~/.cargo/bin) and run --install from there"
            );
        }
        let mut command = vec![
            "--home".into(),
            unit_path_text(self.home, "home")?,
            "--workspace".into(),
            unit_path_text(self.workspace, "workspace")?,
            "gateway".into(),
        ];
        for channel in self.channels {
            if channel.chars().any(char::is_control) {
                bail!("the channel name {channel:?} has a control character");
            }
            command.extend(["--enable-channel".to_owned(), channel.clone()]);
        }
        // The program's path is not searched for `$NAME` (its arguments are),
        // and holds no quote or backslash (refused above): only `%` doubled.
        let program = format!("\"{}\"", executable.replace('%', "%%"));
        let exec: Vec<String> = std::iter::once(program).chain(command.iter().map(|w| exec_word(w))).collect();
        // systemd waits this long after SIGTERM before SIGKILL: past the
        // gateway's grace, so running turns may finish and the rest is saved.
        let stop = self.grace.as_secs() + 15;
        Ok(format!(
            "[Unit]\nDescription=Bub gateway (bub-rs)\nWants=network-online.target\nAfter=network-online.target\n\n\
             [Service]\nType=simple\nWorkingDirectory={}\nExecStart={}\nEnvironmentFile=-{}\n\
             Restart=on-failure\nRestartSec=5s\nTimeoutStopSec={stop}s\n\n[Install]\nWantedBy=default.target\n",
            path_value(self.workspace, "workspace")?,
            exec.join(" "),
            path_value(&self.env_file(), "environment file")?,
        ))
    }
}

/// Whether an environment variable belongs in the service's environment.
fn kept(key: &str) -> bool {
    let proxy = matches!(
        key.to_ascii_uppercase().as_str(),
        "HTTP_PROXY" | "HTTPS_PROXY" | "ALL_PROXY" | "NO_PROXY" | "RUST_LOG"
    );
    (key.starts_with("BUB_") && key != "BUB_HOME") || key.ends_with("_API_KEY") || proxy
}

/// The environment file: `KEY="value"` lines as systemd.exec's
/// `EnvironmentFile=` reads them: in double quotes, a backslash escapes
/// only `"`, `\`, `` ` `` and `$` (any other stays, so `\n` would reach the
/// service as two characters), and a newline is part of the value.
/// Names that are no environment name are left out.
pub fn env_file_text(vars: impl IntoIterator<Item = (String, String)>) -> String {
    let valid = |k: &str| {
        !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let mut vars: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| kept(k) && valid(k)).collect();
    vars.sort();
    let mut text = String::from("# bub gateway --install: the service's environment (only you can read this file)\n");
    for (key, value) in vars {
        let mut quoted = String::with_capacity(value.len() + 2);
        for c in value.chars() {
            if matches!(c, '"' | '\\' | '`' | '$') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        let _ = writeln!(text, "{key}=\"{quoted}\"");
    }
    text
}

/// `systemctl --user <args>`, when there is a systemctl: Ok(false) when
/// there is none.
fn systemctl(args: &[&str]) -> Result<bool> {
    let output = match Command::new("systemctl").arg("--user").args(args).output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => bail!("cannot run systemctl: {e}"),
    };
    if !output.status.success() {
        let detail = String::from_utf8_lossy(if output.stderr.is_empty() { &output.stdout } else { &output.stderr });
        bail!("systemctl --user {} failed: {}", args.join(" "), detail.trim());
    }
    Ok(true)
}

fn by_hand(steps: &[&str]) -> String {
    let mut text = String::from("run these to start it (and at every login):\n");
    for step in steps {
        let _ = writeln!(text, "  systemctl --user {step}");
    }
    text.push_str("(no systemd user manager here? run the ExecStart line of the unit under your service manager)");
    text
}

/// `--install`.
pub fn install(service: &Service<'_>) -> Result<()> {
    // Refused before anything is written.
    let unit = service.unit()?;
    let path = unit_path()?;
    let dir = path.parent().expect("a unit path has a folder");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let env = env_file_text(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| !super::dotenv::from_dotenv(k)),
    );
    bub_kit::files::create_private_dir(service.home)
        .and_then(|()| bub_kit::files::write_private(&service.env_file(), env.as_bytes()))
        .with_context(|| format!("cannot write {}", service.env_file().display()))?;
    std::fs::write(&path, unit).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    println!("wrote {} (the service's variables; only you can read it)", service.env_file().display());
    let started = (|| -> Result<bool> {
        Ok(systemctl(&["daemon-reload"])? && systemctl(&["enable", UNIT])? && systemctl(&["restart", UNIT])?)
    })();
    match started {
        Ok(true) => {
            println!("enabled and started {UNIT} (systemctl --user status {UNIT}; journalctl --user -u {UNIT})")
        }
        Ok(false) => println!("systemctl not found; {}", by_hand(&["daemon-reload", &format!("enable --now {UNIT}")])),
        Err(e) => {
            println!("{e:#}\n{}", by_hand(&["daemon-reload", &format!("enable --now {UNIT}")]));
        }
    }
    enable_linger();
    Ok(())
}

/// The user's name, for logind: the password database's entry of our
/// uid (`$USER` is not set under every service manager or `sudo -u`).
fn user_name() -> Option<String> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let from_db = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 2 && fields[2] == uid).then(|| fields[0].to_owned())
    });
    from_db.or_else(|| std::env::var("USER").ok()).filter(|u| !u.is_empty())
}

/// Whether logind keeps this user's manager running without a login
/// session (`loginctl enable-linger`): it records that as a file.
fn lingering(user: &str) -> bool {
    Path::new("/var/lib/systemd/linger").join(user).exists()
}

/// A user service runs only while the user is logged in unless lingering
/// is on: then it starts at boot and survives logout. Turned on here, or
/// the command printed when that is not allowed.
fn enable_linger() {
    let Some(user) = user_name() else {
        println!("lingering: cannot tell who you are; run `loginctl enable-linger $USER` so the gateway runs without a login");
        return;
    };
    if lingering(&user) {
        println!("lingering: on for {user} (the gateway starts at boot and survives logout)");
        return;
    }
    match Command::new("loginctl").args(["enable-linger", &user]).output() {
        Ok(out) if out.status.success() && lingering(&user) => {
            println!("lingering: turned on for {user} (the gateway starts at boot and survives logout)")
        }
        Ok(out) => {
            let detail = String::from_utf8_lossy(if out.stderr.is_empty() { &out.stdout } else { &out.stderr });
            println!(
                "lingering: not turned on ({}); without it the gateway stops when you log out. Run \
                 `sudo loginctl enable-linger {user}`",
                detail.trim()
            );
        }
        Err(_) => println!(
            "lingering: no loginctl here; on a systemd machine run `sudo loginctl enable-linger {user}` so the \
             gateway starts at boot and survives logout"
        ),
    }
}

/// `--uninstall`.
pub fn uninstall(home: &Path) -> Result<()> {
    let path = unit_path()?;
    let env_file = home.join("gateway.env");
    if !path.exists() {
        println!("{UNIT} is not installed ({} does not exist)", path.display());
    } else {
        match systemctl(&["disable", "--now", UNIT]) {
            Ok(true) => println!("stopped and disabled {UNIT}"),
            Ok(false) => println!("systemctl not found; stop the gateway yourself if it runs"),
            Err(e) => println!("{e:#}; stop the gateway yourself if it runs"),
        }
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        println!("removed {}", path.display());
        let _ = systemctl(&["daemon-reload"]);
    }
    if env_file.exists() {
        std::fs::remove_file(&env_file).with_context(|| format!("cannot remove {}", env_file.display()))?;
        println!("removed {}", env_file.display());
    }
    Ok(())
}

/// `--status`.
pub fn status(home: &Path) -> Result<()> {
    let path = unit_path()?;
    if path.exists() {
        println!("service: {} installed", path.display());
        let state = |what: &str| {
            Command::new("systemctl")
                .args(["--user", what, UNIT])
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        match (state("is-enabled"), state("is-active")) {
            (Some(enabled), Some(active)) => println!("systemd: {enabled}, {active}"),
            _ => println!("systemd: no user manager answers (systemctl --user status {UNIT})"),
        }
        match user_name() {
            Some(user) if lingering(&user) => println!("lingering: on for {user} (starts at boot, survives logout)"),
            Some(user) => println!(
                "lingering: off for {user}: the service stops at logout and starts only at login \
                 (sudo loginctl enable-linger {user})"
            ),
            None => println!("lingering: unknown (cannot tell who you are)"),
        }
    } else {
        println!("service: not installed (bub gateway --install)");
    }
    let running = bub_host::gateway::running_gateways(home);
    if running.is_empty() {
        println!("gateways of {}: none running (scheduled jobs fire only while one runs)", home.display());
    }
    for pid in running {
        println!("gateway of {}: running, pid {pid}", home.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_quotes_command_words_and_writes_paths_bare() {
        let channels = vec!["telegram".to_owned(), "my chan%".to_owned()];
        let service = Service {
            executable: Path::new("/opt/bub/bin/bub"),
            home: Path::new("/home/a/.bub $x"),
            workspace: Path::new("/home/a/my \"ws\" 100%"),
            channels: &channels,
            grace: std::time::Duration::from_secs(30),
        };
        let unit = service.unit().unwrap();
        assert!(unit.contains("WorkingDirectory=/home/a/my \"ws\" 100%%\n"), "{unit}");
        assert!(unit.contains(
            r#"ExecStart="/opt/bub/bin/bub" "--home" "/home/a/.bub $$x" "--workspace" "/home/a/my \"ws\" 100%%" "gateway" "--enable-channel" "telegram" "--enable-channel" "my chan%%""#
        ), "{unit}");
        assert!(unit.contains("Restart=on-failure\n") && unit.contains("TimeoutStopSec=45s\n"), "{unit}");
        assert!(unit.contains("EnvironmentFile=-/home/a/.bub $x/gateway.env\n"), "{unit}");
    }

    #[test]
    fn paths_a_unit_cannot_name_are_refused_with_the_reason() {
        let channels = vec![];
        let service = |executable: &'static str, workspace: &'static str| Service {
            executable: Path::new(executable),
            home: Path::new("/home/a/.bub"),
            workspace: Path::new(workspace),
            channels: &channels,
            grace: std::time::Duration::from_secs(30),
        };
        let err = service("/opt/it's/bub", "/w").unit().unwrap_err().to_string();
        assert!(err.contains("quote or a backslash") && err.contains("install bub elsewhere"), "{err}");
        let err = service("/opt/bub", "/w/line\nbreak").unit().unwrap_err().to_string();
        assert!(err.contains("control character"), "{err}");
        let err = service("/opt/bub", "/w/trailing ").unit().unwrap_err().to_string();
        assert!(err.contains("whitespace at an end"), "{err}");
        let err = service("/opt/bub", "relative").unit().unwrap_err().to_string();
        assert!(err.contains("not an absolute path"), "{err}");
    }

    #[test]
    fn the_environment_file_keeps_bub_keys_and_proxies_only() {
        let text = env_file_text([
            ("BUB_TELEGRAM_TOKEN".to_owned(), "1:a\"b".to_owned()),
            ("OPENAI_API_KEY".to_owned(), "sk".to_owned()),
            ("PATH".to_owned(), "/bin".to_owned()),
            ("BUB_HOME".to_owned(), "/x".to_owned()),
            ("https_proxy".to_owned(), "http://p:1".to_owned()),
        ]);
        assert!(text.contains("BUB_TELEGRAM_TOKEN=\"1:a\\\"b\"\n"), "{text}");
        assert!(text.contains("OPENAI_API_KEY=\"sk\"") && text.contains("https_proxy="), "{text}");
        assert!(!text.contains("PATH=") && !text.contains("BUB_HOME"), "{text}");
        let text = env_file_text([
            ("BUB_X".to_owned(), "a$b`c\\d\ne".to_owned()),
            ("BUB_BAD-NAME".to_owned(), "x".to_owned()),
        ]);
        assert!(text.contains(concat!(r#"BUB_X="a\$b\`c\\d"#, "\ne\"\n")), "{text}");
        assert!(!text.contains("BAD-NAME"), "{text}");
    }
}

//! Agent Plugins 1.0 packages: a folder with a `plugin.json` manifest,
//! skills under `skills/` and MCP servers in an `mcp.json`, discovered under
//! `<workspace>/.agents/plugins/` and `~/.agents/plugins/` as Bub's
//! bub-agent-plugins discovers them (agent-plugins.org's 1.0.0 schemas).
//!
//! This module reads and checks packages; the two halves run through the
//! code paths bub-rs has for them: the skills join the builtin skill
//! listing (`bub_builtin::skills`), the servers the `mcp` plugin's.
//!
//! A package is someone else's files, so every rule of the loader holds:
//! a manifest must name the 1.0.0 schema and a valid `name`; a skill folder,
//! `mcp.json` or server `command` that leads outside the package (a
//! symbolic link, `..`) is refused; a stdio command is a bare executable
//! name or `./` inside the package; a remote server is `https://` (plain
//! `http://` only on loopback), without user info or fragment; the
//! variables `${PLUGIN_ROOT}` and `${PLUGIN_DATA}` expand to the package
//! and its data folder (`$BUB_HOME/agent-plugins/<name>`, made owner-only).
//! What fails is left out with a diagnostic naming the file and the rule;
//! the rest of the package, and the other packages, load.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// The manifest schema a package must name.
pub const PLUGIN_SCHEMA_ID: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
/// The `mcp.json` schema.
pub const MCP_SCHEMA_ID: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";
/// Where packages are found, under the workspace and the user's home.
pub const PACKAGES_DIR: &str = ".agents/plugins";

const MANIFEST_FIELDS: &[&str] = &[
    "$schema",
    "name",
    "version",
    "description",
    "author",
    "homepage",
    "repository",
    "license",
    "keywords",
    "extensions",
];

/// One loaded package.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// Its manifest's `name`.
    pub name: String,
    /// Its folder, resolved.
    pub root: PathBuf,
    /// Its valid-looking skill folders (each holds a `SKILL.md`).
    pub skill_dirs: Vec<PathBuf>,
    /// Its MCP servers as `mcp.json` entries bub-rs reads, named
    /// `<package>.<server>`.
    pub mcp_servers: Vec<(String, Value)>,
}

/// What discovery found: the packages in order, and what was left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    /// Loaded packages, first of each name.
    pub packages: Vec<Package>,
    /// One line per thing left out: the file, and why.
    pub diagnostics: Vec<String>,
}

impl Catalog {
    /// Every package's skill folders, in package order.
    pub fn skill_dirs(&self) -> Vec<PathBuf> {
        self.packages.iter().flat_map(|p| p.skill_dirs.iter().cloned()).collect()
    }

    /// Every package's MCP servers, in package order.
    pub fn mcp_servers(&self) -> Vec<(String, Value)> {
        self.packages.iter().flat_map(|p| p.mcp_servers.iter().cloned()).collect()
    }
}

/// The package folders under `<workspace>/.agents/plugins` and then
/// `<user_home>/.agents/plugins`, each sorted by name.
pub fn package_roots(workspace: &Path, user_home: Option<&Path>) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for parent in std::iter::once(workspace.join(PACKAGES_DIR)).chain(user_home.map(|h| h.join(PACKAGES_DIR))) {
        let Ok(entries) = std::fs::read_dir(&parent) else { continue };
        let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
        children.sort();
        roots.extend(children);
    }
    roots
}

/// Discovers and loads the packages of `workspace` and the user's home;
/// `data_root` holds each package's data folder.
pub fn discover(workspace: &Path, user_home: Option<&Path>, data_root: &Path) -> Catalog {
    load(&package_roots(workspace, user_home), data_root)
}

/// Loads the packages at `roots`, in order; a second package of a name is
/// left out.
pub fn load(roots: &[PathBuf], data_root: &Path) -> Catalog {
    let mut catalog = Catalog::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    for candidate in roots {
        let root = match candidate.canonicalize() {
            Ok(r) => r,
            Err(e) => {
                catalog.diagnostics.push(format!("{}: cannot resolve plugin root: {e}", candidate.display()));
                continue;
            }
        };
        if seen.contains(&root) {
            continue;
        }
        seen.push(root.clone());
        let Some(package) = load_one(&root, data_root, &mut catalog.diagnostics) else { continue };
        if catalog.packages.iter().any(|p| p.name == package.name) {
            catalog.diagnostics.push(format!("{}: duplicate plugin name '{}' ignored", root.display(), package.name));
            continue;
        }
        catalog.packages.push(package);
    }
    catalog
}

fn contained(path: &Path, root: &Path) -> bool {
    path.canonicalize().is_ok_and(|p| p.starts_with(root))
}

/// Whether every entry below `dir` (links not followed) stays in `root`.
fn tree_contained(dir: &Path, root: &Path, depth: usize) -> bool {
    if depth > 16 || !contained(dir, root) {
        return false;
    }
    std::fs::read_dir(dir).into_iter().flatten().flatten().all(|e| {
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => tree_contained(&path, root, depth + 1),
            _ => contained(&path, root),
        }
    })
}

fn read_object(path: &Path) -> Result<Map<String, Value>, String> {
    let bytes = crate::files::read_trusted(path, 1 << 20).map_err(|e| e.to_string())?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("top level must be an object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The manifest `name` rule: 1–64 of `a-z 0-9 . -`, starting and ending
/// with a letter or digit, no `--` or `..`.
fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=64).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("--")
        && !name.contains("..")
}

/// The first way `manifest` breaks the 1.0.0 schema, if any.
fn manifest_error(m: &Map<String, Value>) -> Option<String> {
    match m.get("$schema") {
        Some(Value::String(s)) if s == PLUGIN_SCHEMA_ID => {}
        Some(_) => return Some(format!("`$schema` must be {PLUGIN_SCHEMA_ID:?}")),
        None => return Some("'$schema' is a required property".into()),
    }
    match m.get("name") {
        Some(Value::String(n)) if valid_name(n) => {}
        Some(Value::String(n)) => return Some(format!("{n:?} is not a valid plugin name")),
        Some(_) => return Some("`name` must be a string".into()),
        None => return Some("'name' is a required property".into()),
    }
    for key in ["version", "description", "homepage", "repository", "license"] {
        if m.get(key).is_some_and(|v| !v.is_string()) {
            return Some(format!("`{key}` must be a string"));
        }
    }
    if let Some(author) = m.get("author") {
        let Some(a) = author.as_object() else { return Some("`author` must be an object".into()) };
        if a.iter().any(|(k, v)| !["name", "email", "url"].contains(&k.as_str()) || !v.is_string()) {
            return Some("`author` takes only the strings name, email and url".into());
        }
    }
    if m.get("keywords").is_some_and(|k| !k.as_array().is_some_and(|a| a.iter().all(Value::is_string))) {
        return Some("`keywords` must be a list of strings".into());
    }
    None
}

fn load_one(root: &Path, data_root: &Path, diagnostics: &mut Vec<String>) -> Option<Package> {
    let manifest_path = root.join("plugin.json");
    if !manifest_path.is_file() || !contained(&manifest_path, root) {
        diagnostics.push(format!("{}: plugin.json is missing or escapes the plugin root", root.display()));
        return None;
    }
    let manifest = match read_object(&manifest_path) {
        Ok(m) => m,
        Err(e) => {
            diagnostics.push(format!("{}: invalid manifest: {e}", manifest_path.display()));
            return None;
        }
    };
    let unknown: Vec<&str> =
        manifest.keys().map(String::as_str).filter(|k| !MANIFEST_FIELDS.contains(k)).collect::<Vec<_>>();
    if !unknown.is_empty() {
        diagnostics.push(format!("{}: ignored unknown fields: {}", manifest_path.display(), unknown.join(", ")));
    }
    if let Some(e) = manifest_error(&manifest) {
        diagnostics.push(format!("{}: manifest rejected: {e}", manifest_path.display()));
        return None;
    }
    let name = manifest["name"].as_str().unwrap_or_default().to_owned();
    let mut package = Package { name, root: root.to_owned(), skill_dirs: Vec::new(), mcp_servers: Vec::new() };
    package.skill_dirs = skill_dirs(root, diagnostics);
    package.mcp_servers = mcp_servers(&package.name, root, data_root, diagnostics);
    Some(package)
}

fn skill_dirs(root: &Path, diagnostics: &mut Vec<String>) -> Vec<PathBuf> {
    let skills = root.join("skills");
    if !skills.exists() {
        return Vec::new();
    }
    if !skills.is_dir() || !contained(&skills, root) {
        diagnostics.push(format!("{}: skills component is not a contained directory", skills.display()));
        return Vec::new();
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&skills).into_iter().flatten().flatten().map(|e| e.path()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let file = dir.join("SKILL.md");
        if !dir.is_dir() || !file.exists() {
            continue;
        }
        if !file.is_file() || !tree_contained(&dir, root, 0) {
            diagnostics
                .push(format!("{}: skill skipped because a package path escapes the plugin root", file.display()));
            continue;
        }
        out.push(dir.canonicalize().unwrap_or(dir));
    }
    out
}

fn mcp_servers(package: &str, root: &Path, data_root: &Path, diagnostics: &mut Vec<String>) -> Vec<(String, Value)> {
    let path = root.join("mcp.json");
    if !path.exists() {
        return Vec::new();
    }
    let disabled = |why: &str| format!("{}: MCP component disabled: {why}", path.display());
    if !path.is_file() || !contained(&path, root) {
        diagnostics.push(format!("{}: MCP component is not a contained regular file", path.display()));
        return Vec::new();
    }
    let data = match read_object(&path) {
        Ok(d) => d,
        Err(e) => {
            diagnostics.push(disabled(&e));
            return Vec::new();
        }
    };
    if data.len() != 2 || !data.contains_key("$schema") || !data.contains_key("mcpServers") {
        diagnostics.push(disabled("expected only $schema and mcpServers"));
        return Vec::new();
    }
    if data["$schema"] != json!(MCP_SCHEMA_ID) {
        diagnostics.push(disabled("unsupported or mismatched schema"));
        return Vec::new();
    }
    let Some(servers) = data["mcpServers"].as_object() else {
        diagnostics.push(disabled("mcpServers must be an object"));
        return Vec::new();
    };
    let plugin_data = data_root.join(package);
    if let Err(e) = crate::files::create_private_dir(&plugin_data) {
        diagnostics.push(disabled(&format!("cannot create PLUGIN_DATA: {e}")));
        return Vec::new();
    }
    let plugin_data = plugin_data.canonicalize().unwrap_or(plugin_data);
    let mut out = Vec::new();
    for (server, config) in servers {
        match adapt(config, root, &plugin_data) {
            Ok(entry) => out.push((format!("{package}.{server}"), entry)),
            Err(e) => diagnostics.push(format!("{}#{server}: invalid MCP server skipped: {e}", path.display())),
        }
    }
    out
}

fn expand(value: &str, root: &Path, data: &Path) -> String {
    value.replace("${PLUGIN_ROOT}", &root.to_string_lossy()).replace("${PLUGIN_DATA}", &data.to_string_lossy())
}

fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => {
            a.iter().map(|x| x.as_str().map(str::to_owned).ok_or_else(|| format!("`{what}` must be strings"))).collect()
        }
        Some(_) => Err(format!("`{what}` must be a list of strings")),
    }
}

fn string_map(v: Option<&Value>, what: &str) -> Result<Vec<(String, String)>, String> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, x)| {
                x.as_str().map(|s| (k.clone(), s.to_owned())).ok_or_else(|| format!("`{what}.{k}` must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("`{what}` must be an object of strings")),
    }
}

/// One server of a package's `mcp.json` as an entry bub-rs's `mcp` plugin
/// reads, or why it is refused.
fn adapt(config: &Value, root: &Path, data: &Path) -> Result<Value, String> {
    let Some(c) = config.as_object() else { return Err("a server must be an object".into()) };
    let kind = c.get("type").and_then(Value::as_str).ok_or("'type' is a required property")?;
    let allowed: &[&str] = match kind {
        "stdio" => &["type", "command", "args", "env", "cwd"],
        "streamable-http" | "sse" => &["type", "url", "headers"],
        other => return Err(format!("{other:?} is not one of 'stdio', 'streamable-http', 'sse'")),
    };
    if let Some(extra) = c.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("additional property {extra:?} is not allowed"));
    }
    if kind == "stdio" {
        let command = c
            .get("command")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("'command' is a required property")?;
        let command = if let Some(rest) = command.strip_prefix("./") {
            let resolved = root.join(rest);
            if !contained(&resolved, root) {
                return Err("command escapes the plugin root".into());
            }
            resolved.canonicalize().map_err(|e| format!("command {command:?}: {e}"))?.to_string_lossy().into_owned()
        } else if command == "." || command == ".." || command.contains('/') || command.contains('\\') {
            return Err("command must be a bare executable or start with ./".into());
        } else {
            command.to_owned()
        };
        let args: Vec<String> = strings(c.get("args"), "args")?.iter().map(|a| expand(a, root, data)).collect();
        let mut env = Map::new();
        for (k, v) in string_map(c.get("env"), "env")? {
            if k == "PLUGIN_ROOT" || k == "PLUGIN_DATA" {
                return Err(format!("`env` may not set {k}"));
            }
            env.insert(k, json!(expand(&v, root, data)));
        }
        env.insert("PLUGIN_ROOT".into(), json!(root.to_string_lossy()));
        env.insert("PLUGIN_DATA".into(), json!(data.to_string_lossy()));
        let cwd = match c.get("cwd") {
            None => root.to_owned(),
            Some(Value::String(cwd)) => {
                let (base, resolved) = if let Some(rest) = cwd.strip_prefix("./") {
                    (root, root.join(rest))
                } else if cwd.starts_with("${PLUGIN_ROOT}") {
                    (root, PathBuf::from(expand(cwd, root, data)))
                } else if cwd.starts_with("${PLUGIN_DATA}") {
                    (data, PathBuf::from(expand(cwd, root, data)))
                } else {
                    return Err("`cwd` must start with ./, ${PLUGIN_ROOT} or ${PLUGIN_DATA}".into());
                };
                let resolved = resolved.canonicalize().map_err(|e| format!("cwd {cwd:?}: {e}"))?;
                if !resolved.starts_with(base) {
                    return Err("cwd escapes its declared plugin root".into());
                }
                resolved
            }
            Some(_) => return Err("`cwd` must be a string".into()),
        };
        return Ok(
            json!({"command": command, "args": args, "env": env, "cwd": cwd.to_string_lossy(), "transport": "stdio"}),
        );
    }
    let url = c.get("url").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or("'url' is a required property")?;
    remote_url_error(url).map_or(Ok(()), Err)?;
    let mut headers = Map::new();
    for (name, value) in string_map(c.get("headers"), "headers")? {
        let token =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(format!("invalid HTTP header name: {name}"));
        }
        if headers.keys().any(|k| k.eq_ignore_ascii_case(&name)) {
            return Err(format!("duplicate case-insensitive HTTP header: {name}"));
        }
        if value.contains(['\r', '\n']) {
            return Err(format!("invalid HTTP header value for {name}"));
        }
        headers.insert(name, json!(value));
    }
    Ok(json!({"url": url, "headers": headers, "transport": kind}))
}

/// Why a package's server URL is refused: only absolute `https://` (plain
/// `http://` on loopback), without user info or a fragment.
fn remote_url_error(url: &str) -> Option<String> {
    let bad = || Some("URL must be absolute HTTP(S) without user info or fragment".to_owned());
    let Some((scheme, rest)) = url.split_once("://") else { return bad() };
    if !(scheme == "http" || scheme == "https") || url.contains('#') {
        return bad();
    }
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return bad();
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if scheme == "http" && !loopback {
        return Some("non-loopback MCP URLs must use HTTPS".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls_follow_the_published_rules() {
        for good in ["a", "demo", "my.plugin-2", "x9"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a--b", "a..b", "a_b", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(remote_url_error("https://example.com/mcp"), None);
        assert_eq!(remote_url_error("http://127.0.0.1:8000/sse"), None);
        assert_eq!(remote_url_error("http://[::1]:9/mcp"), None);
        assert!(remote_url_error("http://example.com/mcp").unwrap().contains("HTTPS"));
        assert!(remote_url_error("https://user:pw@example.com/").is_some());
        assert!(remote_url_error("https://example.com/#x").is_some());
        assert!(remote_url_error("ftp://example.com/").is_some());
        assert!(remote_url_error("example.com/mcp").is_some());
    }
}

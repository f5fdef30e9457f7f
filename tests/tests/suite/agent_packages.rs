//! Agent Plugins 1.0 packages (agent-plugins.org's published 1.0.0
//! schemas, as Bub's bub-agent-plugins loads them): found under
//! `<workspace>/.agents/plugins/`, their skills listed by the builtin and
//! their MCP servers started by the `mcp` plugin, through the same code
//! paths as a user's own; what breaks the rules is left out, saying why.

use std::os::unix::fs::PermissionsExt as _;

use bub_tests::{build_plugins, lib, run_bub, Home};
use serde_json::json;

const PLUGIN_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
const MCP_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A package written to the published spec (a manifest, a skill, a stdio
/// MCP server shipped inside it as `./bin/server`) works as the user's own
/// skill and server would; a package without the schema, a server outside
/// the package, and a plain-HTTP remote server are each left out with the
/// rule they break, and the rest still works.
#[test]
fn an_agent_plugins_package_brings_its_skills_and_mcp_servers() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 20}));
    let ws = tempfile::tempdir().unwrap();
    let packages = ws.path().join(".agents/plugins");
    let demo = packages.join("demo");
    write(
        &demo.join("plugin.json"),
        &json!({"$schema": PLUGIN_SCHEMA, "name": "demo", "version": "1.0.0", "description": "A demo package",
                "author": {"name": "Ann"}, "keywords": ["demo"]})
        .to_string(),
    );
    write(
        &demo.join("skills/demo-skill/SKILL.md"),
        "---\nname: demo-skill\ndescription: Shows that a package's skill is listed.\n---\nThe demo skill's body.\n",
    );
    let server = demo.join("bin/server");
    std::fs::create_dir_all(server.parent().unwrap()).unwrap();
    std::fs::copy(build_plugins(false).join("bub-mcp-test-server"), &server).unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    write(
        &demo.join("mcp.json"),
        &json!({"$schema": MCP_SCHEMA, "mcpServers": {
            "calc": {"type": "stdio", "command": "./bin/server", "env": {"WHERE": "${PLUGIN_DATA}"}},
            "escaping": {"type": "stdio", "command": "../../../bin/sh"},
            "plain": {"type": "streamable-http", "url": "http://example.com/mcp"},
        }})
        .to_string(),
    );
    write(&packages.join("unschemed/plugin.json"), &json!({"name": "unschemed"}).to_string());

    let ws_arg = ws.path().to_str().unwrap();
    let (out, err, ok) = run_bub(&home, &["-w", ws_arg, "run", ",mcp.demo.calc_echo text=from-a-package"]);
    assert!(ok && out.contains("echo: from-a-package"), "{out}\n{err}");
    assert!(err.contains("manifest rejected: '$schema' is a required property"), "{err}");
    assert!(
        err.contains("#escaping: invalid MCP server skipped: command must be a bare executable or start with ./"),
        "{err}"
    );
    assert!(err.contains("#plain: invalid MCP server skipped: non-loopback MCP URLs must use HTTPS"), "{err}");

    let (out, err, ok) = run_bub(&home, &["-w", ws_arg, "run", ",skill name=demo-skill"]);
    assert!(ok && out.contains("The demo skill's body."), "{out}\n{err}");
    let (out, _, _) = run_bub(&home, &["-w", ws_arg, "run", ",skill"]);
    assert!(out.contains("- demo-skill"), "{out}");

    let data = home.path().join("agent-plugins/demo");
    assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o700, "PLUGIN_DATA is owner-only");
}

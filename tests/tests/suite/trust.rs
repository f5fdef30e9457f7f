//! Integrity and trust at load: sha256 against the manifest,
//! permissions, and the remembered verification.

use std::os::unix::fs::PermissionsExt;

use bub_host::PluginStatus;
use bub_tests::{lib, Home};
use serde_json::json;

fn detail(home: &Home, name: &str) -> String {
    match &home.host().registry().plugin(name).unwrap().status {
        PluginStatus::Failed { detail } => detail.clone(),
        other => panic!("{name} should have been refused, is {other:?}"),
    }
}

/// A library changed after install is refused, with the hashes and the fix.
#[test]
fn changed_library_is_refused() {
    let home = Home::new();
    let dir = home.install("x", &lib("tp-sdk"), json!({}));
    let library = dir.join("libtp_sdk.so");
    let mut bytes = std::fs::read(&library).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&library, bytes).unwrap();
    let d = detail(&home, "x");
    assert!(d.contains("the library changed after it was installed") && d.contains("bub plugins install"), "{d}");
}

/// A manifest without a sha256 is refused.
#[test]
fn manifest_without_sha256_is_refused() {
    let home = Home::new();
    let dir = home.install("x", &lib("tp-sdk"), json!({}));
    let path = dir.join("plugin.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("sha256");
    std::fs::write(&path, m.to_string()).unwrap();
    assert!(detail(&home, "x").contains("it has no sha256 recorded in its manifest"));
}

/// A folder or library writable by group or others is refused, with the chmod to run.
#[test]
fn writable_by_others_is_refused() {
    let home = Home::new();
    let dir = home.install("x", &lib("tp-sdk"), json!({}));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = detail(&home, "x");
    assert!(d.contains("writable by group or others (mode 777)") && d.contains("chmod go-w"), "{d}");

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let library = dir.join("libtp_sdk.so");
    std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o775)).unwrap();
    let d = detail(&home, "x");
    assert!(d.contains("libtp_sdk.so") && d.contains("mode 775"), "{d}");

    std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(home.host().registry().plugin("x").unwrap().status, PluginStatus::Loaded);
}

/// The remembered verification is dropped when the file changes, even if
/// the change is undone in content only (same bytes, new ctime).
#[test]
fn verification_is_remembered_per_file_version() {
    let home = Home::new();
    let dir = home.install("x", &lib("tp-sdk"), json!({}));
    let stamp = std::fs::read_to_string(dir.join(bub_host::integrity::VERIFIED_FILE)).unwrap();
    assert!(home.host().registry().plugin("x").unwrap().status == PluginStatus::Loaded);
    // Replace the file with the same bytes (a new inode, as any sane update
    // does: rewriting a loaded library in place crashes the processes that
    // have it mapped). The stamp no longer matches, so the hash is checked
    // again and the stamp refreshed.
    let library = dir.join("libtp_sdk.so");
    let copy = dir.join("libtp_sdk.so.new");
    std::fs::copy(&library, &copy).unwrap();
    std::fs::rename(&copy, &library).unwrap();
    assert!(home.host().registry().plugin("x").unwrap().status == PluginStatus::Loaded);
    let again = std::fs::read_to_string(dir.join(bub_host::integrity::VERIFIED_FILE)).unwrap();
    assert_ne!(stamp, again);
}

/// A plugin owned by another user (not root) is refused, with the fix.
#[test]
fn owned_by_another_user_is_refused() {
    use std::os::unix::fs::chown;
    let home = Home::new();
    let dir = home.install("x", &lib("tp-sdk"), json!({}));
    if rustix::process::geteuid().as_raw() != 0 {
        // Only root can give a file away; elsewhere the check is covered by
        // `bub plugins list` refusing foreign plugins in real use.
        return;
    }
    chown(dir.join("libtp_sdk.so"), Some(12345), None).unwrap();
    let d = detail(&home, "x");
    assert!(d.contains("is owned by uid 12345, but bub runs as uid 0") && d.contains("reinstall"), "{d}");
    // Root-owned files are accepted for anyone.
    chown(dir.join("libtp_sdk.so"), Some(0), None).unwrap();
    assert_eq!(home.host().registry().plugin("x").unwrap().status, PluginStatus::Loaded);
}

/// Every folder above a plugin that another user
/// could write makes it refused (ssh's StrictModes), naming the folder and
/// the fix; a sticky folder (like /tmp) is fine. A library that is a
/// symbolic link is refused (the file checked is the file loaded: it is
/// opened once, without following links, and loaded through its descriptor).
#[test]
fn writable_parents_and_symlinked_libraries_are_refused() {
    let home = Home::new();
    home.install("x", &lib("tp-sdk"), json!({}));
    home.install("y", &lib("tp-sdk"), json!({}));
    let set_mode =
        |p: &std::path::Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    set_mode(home.path(), 0o775);
    let d = detail(&home, "x");
    assert!(d.contains("is writable by group or others (mode 775)") && d.contains("it holds the plugin folder"), "{d}");
    // The parents the plugins share are checked once per load: a failed
    // check is not taken for a passed one by the next plugin.
    let d = detail(&home, "y");
    assert!(d.contains("is writable by group or others (mode 775)"), "{d}");
    assert!(d.contains(&format!("chmod go-w {}", home.path().display())), "{d}");
    set_mode(home.path(), 0o1777);
    assert!(matches!(home.host().registry().plugin("x").unwrap().status, PluginStatus::Loaded), "sticky is fine");
    set_mode(home.path(), 0o700);

    let dir = home.path().join("plugins/x");
    let real = home.path().join("elsewhere.so");
    std::fs::rename(dir.join("libtp_sdk.so"), &real).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("libtp_sdk.so")).unwrap();
    let d = detail(&home, "x");
    assert!(d.contains("is a symbolic link"), "{d}");
}

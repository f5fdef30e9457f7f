//! A plugin set's members: each a plugin of its own in the set's library
//! (or an isolated set's process), with a name checked as any plugin's and
//! the hook slots it declared, by name.

use std::sync::Arc;

use crate::registry::{Hooks, PluginRecord, PluginStatus};

/// The record of a plugin set's member: a plugin of its own, in the set's
/// library; hooks by name (names this host does not know are logged).
pub(crate) fn member_record(set: &PluginRecord, member: bub_abi::abi::MemberPlugin) -> PluginRecord {
    let name = member.name.as_str().to_owned();
    let mut record = PluginRecord::failed(name.clone(), set.path.clone(), String::new());
    record.member_of = Some(set.name.clone());
    record.version = member.version.as_str().to_owned();
    record.abi_version = set.abi_version.clone();
    record.description = member.description.as_str().to_owned();
    if let Some(detail) = member_name_problem(&set.name, &name) {
        record.name = crate::manifest::printable(&name, 64);
        record.status = PluginStatus::Failed { detail };
        record.claims = false;
        return record;
    }
    let slots = member_slots(&set.name, &member);
    record.hooks = Some(Hooks::Slots(Arc::new(slots)));
    record.instance = member.instance;
    record.status = PluginStatus::Loaded;
    record
}

/// Why a plugin set may not register a member named `name`, if it may not
/// (here, and for an isolated set, in the host of its process).
pub(crate) fn member_name_problem(set: &str, name: &str) -> Option<String> {
    (!crate::manifest::valid_name(name) || name == "builtin").then(|| {
        format!(
            "plugin set {set} names a member {:?}: a plugin name uses 1 to 64 letters, digits, '-', '_' or '.'",
            crate::manifest::printable(name, 64)
        )
    })
}

/// A set member's hook slots, by the hooks' names; an implementation of a
/// hook this bub does not know is left out and logged.
pub(crate) fn member_slots(
    set: &str,
    member: &bub_abi::abi::MemberPlugin,
) -> [bub_abi::abi::HookSlot; bub_abi::HOOK_COUNT] {
    let mut slots = [bub_abi::abi::HookSlot::EMPTY; bub_abi::HOOK_COUNT];
    for hook in member.hooks.iter() {
        match bub_abi::HookId::from_name(hook.hook.as_str()) {
            Some(id) => slots[id as usize] = hook.slot,
            None => tracing::warn!(
                target: "bub::plugin",
                "plugin {} (of {set}): this bub has no hook {:?}; that implementation is left out (update bub)",
                crate::manifest::printable(member.name.as_str(), 64),
                crate::manifest::printable(hook.hook.as_str(), 64)
            ),
        }
    }
    slots
}

//! Which channels run (Bub's `ChannelManager.enabled_channels`):
//!
//! - interfaces (`cli`) only when named;
//! - `all`: every enabled channel that is not an interface, minus `!name`;
//! - otherwise the named enabled channels minus `!name`, plus every
//!   lifecycle channel not excluded once any plain channel is named.

use std::collections::HashSet;

use bub_abi::types::ChannelRole;

use super::ChannelEntry;

/// The channels `spec` (names, `all`, `!name`) enables, in provider order.
pub fn select_channels(channels: &[ChannelEntry], spec: &[String]) -> Vec<ChannelEntry> {
    let names = spec.iter().map(|s| s.trim()).filter(|s| !s.is_empty());
    let included: HashSet<&str> = names.clone().filter(|s| !s.starts_with('!')).collect();
    let excluded: HashSet<&str> = names.filter_map(|s| s.strip_prefix('!')).collect();
    let usable = |c: &&ChannelEntry| c.info.enabled && !excluded.contains(c.channel.name());
    if included.contains("all") {
        return channels.iter().filter(usable).filter(|c| c.info.role != ChannelRole::Interface).cloned().collect();
    }
    let mut chosen: Vec<ChannelEntry> =
        channels.iter().filter(usable).filter(|c| included.contains(c.channel.name())).cloned().collect();
    if chosen.iter().any(|c| c.info.role != ChannelRole::Lifecycle) {
        let lifecycles: Vec<ChannelEntry> = channels
            .iter()
            .filter(usable)
            .filter(|c| c.info.role == ChannelRole::Lifecycle && !included.contains(c.channel.name()))
            .cloned()
            .collect();
        chosen.extend(lifecycles);
    }
    chosen
}

//! Scripted test plugin with marker `TryFirst` (see ../../scripted/common.rs).

const MARKER: bub_abi::HookMarker = bub_abi::HookMarker::TryFirst;

include!("../../scripted/common.rs");

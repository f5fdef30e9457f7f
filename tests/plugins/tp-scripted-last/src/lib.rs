//! Scripted test plugin with marker `TryLast` (see ../../scripted/common.rs).

const MARKER: bub_abi::HookMarker = bub_abi::HookMarker::TryLast;

include!("../../scripted/common.rs");

//! Scripted test plugin with marker `Normal` (see ../../scripted/common.rs).

const MARKER: bub_abi::HookMarker = bub_abi::HookMarker::Normal;

include!("../../scripted/common.rs");

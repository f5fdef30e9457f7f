//! The scripted test plugin (marker `Normal`, see ../../scripted/common.rs)
//! built with a global allocator of its own, as a plugin author may choose
//! (mimalloc, jemalloc, …). Its blocks cannot be freed by anyone else's
//! allocator, nor can it free theirs: each block starts 16 bytes (or its
//! alignment) into a block of the system allocator, behind a tag. If the
//! host freed one of the plugin's blocks, glibc aborts ("free(): invalid
//! pointer"); if the plugin freed one of the host's, the tag is missing and
//! it aborts. Any memory crossing the ABI without its maker's free kills
//! the test.

const MARKER: bub_abi::HookMarker = bub_abi::HookMarker::Normal;

include!("../../scripted/common.rs");

include!("../../scripted/tagged_alloc.rs");

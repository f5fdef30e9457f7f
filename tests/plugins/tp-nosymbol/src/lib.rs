//! A real shared library without a bub root module.

/// Something to export, so the library is not empty.
#[unsafe(no_mangle)]
pub extern "C" fn not_a_plugin() -> u32 {
    42
}

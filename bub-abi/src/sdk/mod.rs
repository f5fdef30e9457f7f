//! The plugin-side SDK: what a plugin author writes against.

pub mod args;
pub mod bridge;
pub mod export;
pub mod guard;
pub mod hook;
pub mod logging;
pub mod object;
pub mod plugin;
pub mod resources;
pub mod state;
pub mod stream;

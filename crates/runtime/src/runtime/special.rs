//! The two dispatch rules that are neither "first" nor "many":
//! `onboard_config`'s accumulating loop and the model adapter's choice
//! between `run_model` and `run_model_stream`.

use bub_abi::{types::StateMap, HookError, HookId};
use serde_json::Value;

use super::{failure, finish_sync, Answer, CallArgs, Done, Runtime};
use crate::error::HookFailure;

/// Why `onboard_config` failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OnboardError {
    /// A plugin name was asked for that implements no `onboard_config`
    /// (Bub's `ValueError`).
    #[error("No onboard_config hook found for plugin '{name}'. Available plugins: {available}")]
    NoSuchPlugin {
        /// The name asked for.
        name: String,
        /// The plugins that do implement it, sorted, or `(none)`.
        available: String,
    },
    /// An implementation failed or returned something other than a map.
    #[error(transparent)]
    Failed(#[from] HookFailure),
}

/// Which model hook a turn uses (semantics §H2.1, the model adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSelection {
    /// The hook to dispatch (over every implementation, by priority).
    pub hook: HookId,
    /// The plugin whose declaration chose it.
    pub chosen_by: usize,
}

impl Runtime {
    /// `collect_onboard_config`: implementations run **low priority first**;
    /// each sees the config as merged so far (`current` deep-merged with the
    /// earlier fragments); None is skipped, an async implementation is
    /// skipped with `hook.async_not_supported`, anything but a map is Bub's
    /// `TypeError`. With `plugin`, only that plugin's implementation runs.
    pub fn onboard_config(&self, current: &StateMap, plugin: Option<&str>) -> Result<StateMap, OnboardError> {
        const HOOK: HookId = HookId::OnboardConfig;
        let impls = self.registry.impls(HOOK);
        if let Some(name) = plugin {
            if !impls.iter().any(|i| &*i.plugin == name) {
                let mut names: Vec<&str> = impls.iter().map(|i| &*i.plugin).collect();
                names.sort_unstable();
                names.dedup();
                let available = if names.is_empty() { "(none)".to_owned() } else { names.join(", ") };
                return Err(OnboardError::NoSuchPlugin { name: name.to_owned(), available });
            }
        }
        let mut config = current.clone();
        for imp in impls.iter().rev().filter(|i| plugin.is_none_or(|p| &*i.plugin == p)) {
            let args = CallArgs::onboard_config(&config).map_err(|e| {
                HookFailure::new(
                    &imp.plugin,
                    HOOK,
                    HookError::new(bub_abi::ErrorKind::ARGS, format!("config not serializable: {e}")),
                )
            })?;
            let views = args.views();
            let mut call = args.call(&views, bub_abi::abi::DispatchMode::Sync);
            match finish_sync(HOOK, imp, &mut call) {
                None | Some(Done::None) => {}
                Some(Done::Error(e)) => return Err(failure(imp, HOOK, e).into()),
                Some(Done::Answer(Answer::Value(v))) => match v.deserialize::<Value>() {
                    Ok(Value::Object(fragment)) => crate::config::deep_merge(&mut config, fragment),
                    Ok(Value::Null) => {}
                    _ => return Err(type_error(&imp.plugin).into()),
                },
                Some(_) => return Err(type_error(&imp.plugin).into()),
            }
        }
        Ok(config)
    }

    /// The model adapter's choice: walk plugins in **reverse registration
    /// order** (markers ignored); the first that declares `run_model` or
    /// `run_model_stream` decides. For text output its `run_model` is
    /// preferred, for streaming its `run_model_stream`. None when no plugin
    /// declares either.
    pub fn select_model(&self, stream: bool) -> Option<ModelSelection> {
        let (preferred, other) = if stream {
            (HookId::RunModelStream, HookId::RunModel)
        } else {
            (HookId::RunModel, HookId::RunModelStream)
        };
        let plugins = self.registry.plugins();
        (0..plugins.len()).rev().find_map(|i| {
            let p = &plugins[i];
            if p.implements(preferred) {
                Some(ModelSelection { hook: preferred, chosen_by: i })
            } else if p.implements(other) {
                Some(ModelSelection { hook: other, chosen_by: i })
            } else {
                None
            }
        })
    }
}

fn type_error(plugin: &str) -> HookFailure {
    HookFailure::new(
        plugin,
        HookId::OnboardConfig,
        HookError::new(bub_abi::ErrorKind::TYPE, "TypeError: hook.onboard_config must return dict or None"),
    )
}

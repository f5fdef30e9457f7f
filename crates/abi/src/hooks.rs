//! The hook table: the one place where Bub's hooks are listed.
//!
//! Everything else is generated from [`for_each_hook!`](crate::for_each_hook):
//! the ABI slots ([`HookTable`](crate::abi::HookTable)), the SDK trait
//! ([`Plugin`](crate::Plugin)) with its typed, lazily parsed argument views,
//! the host's dispatch argument builders and the `bub hooks` listing. Adding a
//! hook is one entry here (appended at the end, with the next ABI minor as its
//! `since` tag, so that older plugins keep loading). ABI 2.0 starts with
//! Bub 0.6.0a3's 26 hooks plus `provide_tools`, all `since` 0; 2.7 appends
//! `provide_skill_roots` (Bub finds skills in its `skills` namespace
//! package; here the plugin that knows such folders names them).
//!
//! Entry grammar, one per hook, in ABI slot order:
//!
//! ```text
//! (<since-minor> <snake_name> <PascalName> {
//!     kind: <first|many|first_sync|many_sync|model|chain|observer|notify|onboard>,
//!     args: [ <wire index> <value|state|object> <name>: <type>, ... ],
//!     returns: <SDK return type>,
//!     doc: "<one line>",
//! })
//! ```
//!
//! Argument kinds: `value` arguments cross as host-owned values
//! ([`crate::value`]), built once per dispatch and lent to every
//! implementation; a plugin reads only what it declares. `state` is the live
//! [`TurnState`](crate::TurnState) handle; `object` is a host object handed
//! to the plugin (the CLI app, a message handler, the framework `on_error`
//! may dispatch through). An `Option<Object>` argument may be absent.
//!
//! `returns` is what the SDK method returns and what the host's typed entry
//! point (`bub_host::Runtime::<hook>`) reads back; `kind` decides the
//! dispatch rule, and with it whether an `async fn` is allowed (not on
//! sync-only kinds: a compile error in `#[bub_abi::plugin]`).

/// Calls `$callback! { entries… }` with every hook of this ABI version.
///
/// The callback is a `macro_rules!` macro (an identifier in scope) that
/// accepts the entry grammar described in the [module docs](crate::hooks).
#[macro_export]
macro_rules! for_each_hook {
    ($callback:ident) => {
        $crate::__hook_filter! { $callback []
        (0 resolve_session ResolveSession {
            kind: first,
            args: [0 value message: $crate::types::Envelope],
            returns: Option<String>,
            doc: "Resolve the session id of an inbound message (first non-None wins).",
        })
        (0 load_state LoadState {
            kind: many,
            args: [0 value message: $crate::types::Envelope, 1 value session_id: String],
            returns: Option<$crate::types::StateMap>,
            doc: "Contribute state for the turn; results are merged, higher priority wins.",
        })
        (0 build_prompt BuildPrompt {
            kind: first,
            args: [0 value message: $crate::types::Envelope, 1 value session_id: String,
                   2 state state: $crate::TurnState],
            returns: Option<$crate::types::Prompt>,
            doc: "Build the prompt (text or content parts) for the model.",
        })
        (0 run_model RunModel {
            kind: model,
            args: [0 value prompt: $crate::types::Prompt, 1 value session_id: String,
                   2 state state: $crate::TurnState],
            returns: Option<String>,
            doc: "Run the model and return its text.",
        })
        (0 run_model_stream RunModelStream {
            kind: model,
            args: [0 value prompt: $crate::types::Prompt, 1 value session_id: String,
                   2 state state: $crate::TurnState],
            returns: Option<$crate::Object>,
            doc: "Run the model and return a stream of events.",
        })
        (0 continue_prompt ContinuePrompt {
            kind: first,
            args: [0 value prompt: Option<$crate::types::Prompt>, 1 value tape: $crate::types::TapeInfo,
                   2 value state: $crate::types::StreamState],
            returns: Option<String>,
            doc: "Decide the next user message when an agent step continues.",
        })
        (0 save_state SaveState {
            kind: many,
            args: [0 value session_id: String, 1 state state: $crate::TurnState,
                   2 value message: $crate::types::Envelope, 3 value model_output: String],
            returns: (),
            doc: "Persist turn state; runs in a finally after the model stage.",
        })
        (0 render_outbound RenderOutbound {
            kind: many,
            args: [0 value message: $crate::types::Envelope, 1 value session_id: String,
                   2 state state: $crate::TurnState, 3 value model_output: String],
            returns: Option<$crate::types::Outbound>,
            doc: "Render outbound messages (a batch, a single message, or None).",
        })
        (0 dispatch_outbound DispatchOutbound {
            kind: many,
            args: [0 value message: $crate::types::Envelope],
            returns: Option<bool>,
            doc: "Deliver one outbound message.",
        })
        (0 register_cli_commands RegisterCliCommands {
            kind: many_sync,
            args: [0 object app: $crate::Object],
            returns: Option<Vec<$crate::Object>>,
            doc: "Add subcommands to the `bub` command line (returned as command objects).",
        })
        (0 onboard_config OnboardConfig {
            kind: onboard,
            args: [0 value current_config: $crate::types::StateMap],
            returns: Option<$crate::types::StateMap>,
            doc: "Contribute a fragment of the onboarding config.",
        })
        (0 provide_model_options ProvideModelOptions {
            kind: many,
            args: [0 value session_id: String, 1 value workspace: Option<String>],
            returns: Option<$crate::types::ModelOptions>,
            doc: "Offer model choices; merged across plugins.",
        })
        (0 provide_environment ProvideEnvironment {
            kind: first,
            args: [0 value session_id: String, 1 value workspace: String],
            returns: Option<$crate::Object>,
            doc: "Provide the execution environment of a session.",
        })
        (0 on_error OnError {
            kind: notify,
            args: [0 value stage: String, 1 value error: $crate::types::ErrorInfo,
                   2 value message: Option<$crate::types::Envelope>,
                   3 object framework: Option<$crate::Object>],
            returns: (),
            doc: "Observe an error; observers never stop the host.",
        })
        (0 system_prompt SystemPrompt {
            kind: many_sync,
            args: [0 value prompt: $crate::types::Prompt, 1 state state: $crate::TurnState],
            returns: Option<String>,
            doc: "Contribute a block of the system prompt.",
        })
        (0 provide_tape_store ProvideTapeStore {
            kind: first_sync,
            args: [],
            returns: Option<$crate::Object>,
            doc: "Provide the tape store of the running scope.",
        })
        (0 provide_lifespan ProvideLifespan {
            kind: many_sync,
            args: [],
            returns: Option<$crate::Object>,
            doc: "Provide a resource entered for each running scope.",
        })
        (0 provide_tape_sidecar ProvideTapeSidecar {
            kind: many_sync,
            args: [],
            returns: Option<$crate::Object>,
            doc: "Provide a named sidecar tape.",
        })
        (0 provide_channels ProvideChannels {
            kind: many_sync,
            args: [0 object message_handler: $crate::Object],
            returns: Option<Vec<$crate::Object>>,
            doc: "Provide channels; deduplicated by name.",
        })
        (0 build_tape_context BuildTapeContext {
            kind: first_sync,
            args: [],
            returns: Option<$crate::Object>,
            doc: "Choose the tape context strategy of the agent.",
        })
        (0 admit_message AdmitMessage {
            kind: first,
            args: [0 value session_id: String, 1 value message: $crate::types::Envelope,
                   2 value turn: $crate::types::TurnSnapshot],
            returns: Option<$crate::types::AdmitDecision>,
            doc: "Decide how a message is scheduled while a turn runs.",
        })
        (0 provide_steering_inbox ProvideSteeringInbox {
            kind: first_sync,
            args: [],
            returns: Option<$crate::Object>,
            doc: "Provide the steering inbox of the running scope.",
        })
        (0 before_llm_call BeforeLlmCall {
            kind: chain,
            args: [0 value request: $crate::types::LlmCallRequest, 1 state state: $crate::TurnState],
            returns: Option<$crate::types::BeforeLlmCall>,
            doc: "Rewrite a model request or finish it without calling the provider.",
        })
        (0 after_llm_call AfterLlmCall {
            kind: observer,
            args: [0 value request: $crate::types::LlmCallRequest,
                   1 value result: $crate::types::LlmCallResult, 2 state state: $crate::TurnState],
            returns: (),
            doc: "Observe a finished model call.",
        })
        (0 before_tool_call BeforeToolCall {
            kind: chain,
            args: [0 value call: $crate::types::ToolCall, 1 state state: $crate::TurnState],
            returns: Option<$crate::types::ToolCallDecision>,
            doc: "Proceed (maybe with new arguments), replace or deny a tool call.",
        })
        (0 after_tool_call AfterToolCall {
            kind: observer,
            args: [0 value call: $crate::types::ToolCall,
                   1 value result: $crate::types::ToolCallResult, 2 state state: $crate::TurnState],
            returns: Option<$crate::types::Value>,
            doc: "Observe a tool call; a returned value replaces `result.result`.",
        })
        (0 provide_tools ProvideTools {
            kind: many_sync,
            args: [],
            returns: Option<Vec<$crate::Object>>,
            doc: "Provide tools; deduplicated by name.",
        })
        (7 provide_skill_roots ProvideSkillRoots {
            kind: many_sync,
            args: [],
            returns: Option<Vec<String>>,
            doc: "Folders of skills, searched after the project's and the user's (bub-rs; Bub's `skills` package).",
        })
        }
    };
}

/// Passes the table on, entry by entry (the last one through
/// [`__hook_last!`](crate::__hook_last)).
#[doc(hidden)]
#[macro_export]
macro_rules! __hook_filter {
    ($cb:ident [$($acc:tt)*] ($since:literal $($e:tt)*)) => {
        $crate::__hook_last! { $cb [$($acc)*] ($($e)*) }
    };
    ($cb:ident [$($acc:tt)*] ($since:literal $($e:tt)*) $($rest:tt)+) => {
        $crate::__hook_filter! { $cb [$($acc)* ($($e)*)] $($rest)+ }
    };
}

/// The table's last entry: kept in a normal build.
#[cfg(not(feature = "__test-abi-prev-minor"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __hook_last {
    ($cb:ident [$($acc:tt)*] $e:tt) => { $cb! { $($acc)* $e } };
}

/// The table's last entry: dropped when building a test plugin as it would
/// have been built against the previous minor ABI (before that hook was
/// appended).
#[cfg(feature = "__test-abi-prev-minor")]
#[doc(hidden)]
#[macro_export]
macro_rules! __hook_last {
    ($cb:ident [$($acc:tt)*] $e:tt) => { $cb! { $($acc)* } };
}

/// How a hook is dispatched (Bub's rule for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// `call_first`: the first non-None result wins (async dispatch).
    First,
    /// `call_many`: every implementation runs; all results are collected (async).
    Many,
    /// `call_first_sync`: like `First`, but pending results are skipped.
    FirstSync,
    /// `call_many_sync`: like `Many`, but pending results are skipped.
    ManySync,
    /// The model adapter: `run_model` / `run_model_stream`, selected per plugin.
    Model,
    /// Agent interception chain (`before_*`): each sees earlier rewrites.
    Chain,
    /// Agent observer (`after_*`): every implementation; failures are isolated.
    Observer,
    /// `notify_error`: every observer; failures are logged, never raised.
    Notify,
    /// `onboard_config`: sync, low priority first, fragments merged.
    Onboard,
}

impl HookKind {
    /// The name used in listings and docs.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookKind::First => "firstresult",
            HookKind::Many => "broadcast",
            HookKind::FirstSync => "firstresult, sync-only",
            HookKind::ManySync => "broadcast, sync-only",
            HookKind::Model => "model adapter",
            HookKind::Chain => "interception chain",
            HookKind::Observer => "interception observer",
            HookKind::Notify => "error observer",
            HookKind::Onboard => "onboard merge, sync-only",
        }
    }

    /// Whether dispatch of this kind skips pending (async) results.
    pub const fn is_sync_only(self) -> bool {
        matches!(self, HookKind::FirstSync | HookKind::ManySync | HookKind::Onboard)
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __hook_kind {
    (first) => {
        $crate::hooks::HookKind::First
    };
    (many) => {
        $crate::hooks::HookKind::Many
    };
    (first_sync) => {
        $crate::hooks::HookKind::FirstSync
    };
    (many_sync) => {
        $crate::hooks::HookKind::ManySync
    };
    (model) => {
        $crate::hooks::HookKind::Model
    };
    (chain) => {
        $crate::hooks::HookKind::Chain
    };
    (observer) => {
        $crate::hooks::HookKind::Observer
    };
    (notify) => {
        $crate::hooks::HookKind::Notify
    };
    (onboard) => {
        $crate::hooks::HookKind::Onboard
    };
}

/// Static facts about one hook, derived from the table.
#[derive(Debug, Clone, Copy)]
pub struct HookInfo {
    /// The hook's id.
    pub id: HookId,
    /// Bub's name of the hook.
    pub name: &'static str,
    /// The dispatch rule.
    pub kind: HookKind,
    /// Argument names in wire order.
    pub args: &'static [&'static str],
    /// One-line description.
    pub doc: &'static str,
}

macro_rules! gen_hook_ids {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        /// Identifies a hook; the discriminant is the hook's ABI slot index.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum HookId {
            $(
                #[doc = $doc]
                $Pascal,
            )*
        }

        impl HookId {
            /// Every hook of this ABI version, in slot order.
            pub const ALL: &'static [HookId] = &[$(HookId::$Pascal),*];

            /// Static facts about this hook.
            pub const fn info(self) -> &'static HookInfo {
                match self {
                    $(HookId::$Pascal => &HookInfo {
                        id: HookId::$Pascal,
                        name: stringify!($name),
                        kind: $crate::__hook_kind!($kind),
                        args: &[$(stringify!($arg)),*],
                        doc: $doc,
                    },)*
                }
            }

            /// Bub's name of the hook.
            pub const fn name(self) -> &'static str {
                self.info().name
            }

            /// The dispatch rule of the hook.
            pub const fn kind(self) -> HookKind {
                self.info().kind
            }

            /// Looks a hook up by Bub's name.
            pub fn from_name(name: &str) -> Option<HookId> {
                match name {
                    $(stringify!($name) => Some(HookId::$Pascal),)*
                    _ => None,
                }
            }
        }

        /// Hook ids by Bub's snake_case name, for code generated by
        /// `#[bub_abi::plugin]`.
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        pub mod ids {
            $(pub const $name: super::HookId = super::HookId::$Pascal;)*
        }
    };
}
for_each_hook!(gen_hook_ids);

impl std::fmt::Display for HookId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Number of hooks (and ABI slots) in this ABI version.
pub const HOOK_COUNT: usize = HookId::ALL.len();

//! The integration suite: every test in one binary (one link instead of
//! sixteen; nothing here depends on process-global state: logs are captured
//! per thread, homes and workspaces are temporary folders told to each
//! host). Each module names the behaviours of `docs/semantics.md` it proves.

mod agent;
mod agent_loop;
mod agent_packages;
mod agent_run;
mod allocators;
mod app_hooks;
mod bounds;
mod builtin;
mod chat;
mod cli;
mod code_mode;
mod contract;
mod crashes;
mod deadlines;
mod discord;
mod dispatch;
mod examples;
mod faults;
mod fidelity;
mod gateway;
mod host_api;
mod install;
mod isolation;
mod loading;
mod logins;
mod long_sessions;
mod mcp;
mod openai;
mod openai_api;
mod owners;
mod published;
mod python;
mod recorded;
mod schedules;
mod scope;
mod sdk;
mod search;
mod security;
mod shells;
mod skills;
mod slack;
mod special;
mod tape_stores;
mod telegram;
mod traces;
mod trust;
mod turn;

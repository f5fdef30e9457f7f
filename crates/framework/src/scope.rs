//! `running()`: the scope that owns a framework's runtime resources (spec
//! §1.2, §5.1).
//!
//! Entry: every `provide_lifespan` implementation is *called* (priority
//! order), then each lifespan is entered in that order; then the
//! `provide_tape_store` and `provide_steering_inbox` results are entered and
//! become [`Framework::get_tape_store`] / [`Framework::get_steering_inbox`].
//! Exit, normal or not: the store and inbox references are cleared, every
//! cached environment is closed (concurrently, failures logged), then the
//! entered resources exit in reverse order, each told the scope's error.
//! A failed entry exits what was already entered, in reverse, with that
//! error, and returns it.
//!
//! Rust has no async `Drop`, so a scope is left with [`Running::exit`] (or
//! entered and left around a body with [`Framework::scoped`]). A [`Running`]
//! dropped without `exit` still exits its resources, on a tokio task, and
//! logs that it was not exited.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
};

use bub_abi::{types::ErrorInfo, HookId, Object};
use serde_json::{json, Value};

use bub_agent::{context::ContextCache, sessions::SessionIndex};

use super::{Framework, FrameworkError};
use bub_runtime::resources::{Environment, Lifespan, Resource, SteeringInbox, TapeStore};

/// The scope state a framework and its clones share.
#[derive(Default)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    open: bool,
    store: Option<TapeStore>,
    inbox: Option<SteeringInbox>,
    environments: HashMap<String, Option<Environment>>,
    // The store's tapes as the agent's context, kept between turns; made
    // with the first run and gone with the store.
    contexts: Option<Arc<ContextCache>>,
    // The store's tapes' session records, read once per scope.
    sessions: Option<Arc<SessionIndex>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The lock guards plain data; a panic elsewhere cannot leave it torn.
        bub_abi::sync::lock(&self.inner)
    }

    /// Step a of the exit: the store and inbox references go; the cached
    /// environments are handed back to be closed.
    fn release(&self) -> HashMap<String, Option<Environment>> {
        let mut inner = self.lock();
        inner.store = None;
        inner.inbox = None;
        inner.contexts = None;
        inner.sessions = None;
        std::mem::take(&mut inner.environments)
    }

    /// What `_runtime_steering_inbox` holds in the turn state.
    pub(crate) fn inbox_ref(&self) -> Value {
        self.lock().inbox.as_ref().map_or(Value::Null, |i| object_ref(i.resource()))
    }
}

/// How a resource appears in the (JSON) turn state: its kind, provider and
/// name. The live object is reached through the framework.
pub fn object_ref(resource: &Resource) -> Value {
    json!({
        "$resource": resource.object().kind(),
        "plugin": resource.plugin(),
        "name": resource.name(),
    })
}

/// An open `running()` scope. Leave it with [`exit`](Running::exit).
#[must_use = "a scope must be exited with `Running::exit`"]
pub struct Running {
    framework: Framework,
    stack: Vec<Resource>,
    exited: bool,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("stack", &self.stack).finish()
    }
}

impl Framework {
    /// Enters a `running()` scope (semantics §H5.1).
    pub async fn running(&self) -> Result<Running, FrameworkError> {
        {
            let mut inner = self.scope.lock();
            if inner.open {
                return Err(FrameworkError::ScopeOverlap);
            }
            inner.open = true;
        }
        let mut scope = Running { framework: self.clone(), stack: Vec::new(), exited: false };
        match scope.enter_providers().await {
            Ok(()) => Ok(scope),
            Err(e) => {
                // Entered providers exit in reverse, seeing the entry error.
                if let Err(exit_error) = scope.unwind(Some(&e.info())).await {
                    tracing::warn!(target: "bub::scope", "while unwinding a failed scope entry: {exit_error}");
                }
                Err(e)
            }
        }
    }

    /// Runs `body` inside a `running()` scope: the scope exits afterwards,
    /// told the body's error if it failed; the body's error wins over an
    /// exit error.
    pub async fn scoped<T, F, Fut>(&self, body: F) -> Result<T, FrameworkError>
    where
        F: FnOnce(Framework) -> Fut,
        Fut: Future<Output = Result<T, FrameworkError>>,
    {
        let scope = self.running().await?;
        let result = body(self.clone()).await;
        let exit = scope.exit(result.as_ref().err().map(FrameworkError::info).as_ref()).await;
        let value = result?;
        exit?;
        Ok(value)
    }

    /// The scope's tape store; `None` outside a scope.
    pub fn get_tape_store(&self) -> Option<TapeStore> {
        self.scope.lock().store.clone()
    }

    /// Where the agent keeps the scope's session tapes as context messages
    /// between steps and turns (see [`bub_agent::context`]); outside a
    /// scope, a new cache each time.
    pub fn contexts(&self) -> Arc<ContextCache> {
        let mut inner = self.scope.lock();
        if inner.store.is_none() {
            return ContextCache::new();
        }
        inner
            .contexts
            .get_or_insert_with(|| ContextCache::with_budget(ContextCache::budget(&self.settings().environment)))
            .clone()
    }

    /// Which session each of the scope's tapes holds (see
    /// [`bub_agent::sessions`]), read once per scope; outside a scope, a
    /// new index each time.
    pub fn session_index(&self) -> Arc<SessionIndex> {
        let mut inner = self.scope.lock();
        if inner.store.is_none() {
            return SessionIndex::new();
        }
        inner.sessions.get_or_insert_with(SessionIndex::new).clone()
    }

    /// The scope's steering inbox; `None` outside a scope.
    pub fn get_steering_inbox(&self) -> Option<SteeringInbox> {
        self.scope.lock().inbox.clone()
    }

    /// The environment of `session_id` (semantics §H5.2): `provide_environment`
    /// once per session (None cached too) until the scope exits.
    pub async fn get_environment(&self, session_id: &str) -> Result<Option<Environment>, FrameworkError> {
        if !self.runtime.has(HookId::ProvideEnvironment) {
            return Ok(None);
        }
        if let Some(cached) = self.scope.lock().environments.get(session_id) {
            return Ok(cached.clone());
        }
        let env = match self.runtime.provide_environment(session_id, &*self.workspace_text).await? {
            Some(answer) => Some(Environment::from_reply(answer.reply()).map_err(FrameworkError::Type)?),
            None => None,
        };
        let existing = {
            let mut inner = self.scope.lock();
            match inner.environments.get(session_id) {
                Some(other) => Some(other.clone()),
                None => {
                    inner.environments.insert(session_id.to_owned(), env.clone());
                    None
                }
            }
        };
        match existing {
            // Another call cached one meanwhile: keep it, close ours.
            Some(other) => {
                if let Some(ours) = env {
                    close_environment(ours).await;
                }
                Ok(other)
            }
            None => Ok(env),
        }
    }
}

async fn close_environment(env: Environment) {
    if let Err(e) = env.close().await {
        tracing::warn!(target: "bub::scope", "Failed to close environment {:?}: {e}", env.resource());
    }
}

impl Running {
    async fn enter_providers(&mut self) -> Result<(), FrameworkError> {
        let rt = self.framework.runtime.clone();
        // 1–2. Call every lifespan provider, then enter each result in order.
        let lifespans: Vec<Lifespan> =
            rt.provide_lifespan()?.iter().filter_map(|a| Lifespan::from_reply(a.reply()).ok()).collect();
        for lifespan in lifespans {
            self.enter(lifespan.0).await?;
        }
        // 3. The tape store.
        if let Some(answer) = rt.provide_tape_store()? {
            let store = TapeStore::from_reply(answer.reply()).map_err(FrameworkError::Type)?;
            self.enter(store.0.clone()).await?;
            self.framework.scope.lock().store = Some(store);
        }
        // 4. The steering inbox.
        if let Some(answer) = rt.provide_steering_inbox()? {
            let inbox = SteeringInbox::from_reply(answer.reply()).map_err(FrameworkError::Type)?;
            self.enter(inbox.0.clone()).await?;
            self.framework.scope.lock().inbox = Some(inbox);
        }
        Ok(())
    }

    async fn enter(&mut self, resource: Resource) -> Result<(), FrameworkError> {
        resource.enter(self.framework.lifespan_timeout()).await?;
        self.stack.push(resource);
        Ok(())
    }

    /// Enters a host resource (an object with `enter`/`exit`, e.g. made by
    /// `Object::lifespan`); it exits before every provider's resource.
    pub async fn push(&mut self, object: Object, owner: &str) -> Result<(), FrameworkError> {
        let kind = object.kind();
        let resource = Resource::new(object, owner, bub_abi::resources::kinds::LIFESPAN)
            .map_err(|_| FrameworkError::Type(format!("only lifespans can be pushed onto a scope, not `{kind}`")))?;
        self.enter(resource).await
    }

    /// The framework this scope belongs to.
    pub fn framework(&self) -> &Framework {
        &self.framework
    }

    /// Leaves the scope, telling every resource `error` (the body's failure,
    /// if any). Returns the first exit failure; every resource exits anyway.
    pub async fn exit(mut self, error: Option<&ErrorInfo>) -> Result<(), FrameworkError> {
        self.unwind(error).await
    }

    async fn unwind(&mut self, error: Option<&ErrorInfo>) -> Result<(), FrameworkError> {
        self.exited = true;
        let environments = self.framework.scope.release();
        // b. Close cached environments concurrently; failures are logged.
        let mut closing = tokio::task::JoinSet::new();
        for env in environments.into_values().flatten() {
            closing.spawn(close_environment(env));
        }
        while closing.join_next().await.is_some() {}
        // c. Unwind the stack, last entered first.
        let mut first_error = None;
        while let Some(resource) = self.stack.pop() {
            if let Err(e) = resource.exit(error, self.framework.lifespan_timeout()).await {
                tracing::warn!(target: "bub::scope", "{e}");
                first_error.get_or_insert(FrameworkError::from(e));
            }
        }
        self.framework.scope.lock().open = false;
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.exited {
            return;
        }
        tracing::warn!(target: "bub::scope", "a running() scope was dropped without `exit`; exiting its resources now");
        let mut rest =
            Running { framework: self.framework.clone(), stack: std::mem::take(&mut self.stack), exited: true };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = rest.unwind(None).await;
                });
            }
            Err(_) => {
                rest.framework.scope.release();
                rest.framework.scope.lock().open = false;
            }
        }
    }
}

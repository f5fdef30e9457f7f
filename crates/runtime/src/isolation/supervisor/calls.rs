//! How a hook call reaches an isolated plugin: the hook slots (one
//! `extern "C"` function per hook, generated from the hook table) forward
//! to the [`Supervisor`], which sends the call to the member's process,
//! waits for a restart where that is worth it, and turns the answer back
//! into a return.

use super::*;

impl Supervisor {
    /// Forwards one hook call to the process. While the process is being
    /// started again after a crash, an async call waits for it (its
    /// backoff, then the start, off the caller's thread); a sync one waits
    /// at most [`SYNC_RESTART_WAIT`].
    fn call(self: &Arc<Self>, member: usize, hook: HookId, call: &HookCall<'_>) -> HookReturn {
        let sync = call.mode == DispatchMode::Sync || hook.kind().is_sync_only();
        let args = call.args.as_slice();
        let (state, object) = (call.state.into_option(), call.object.into_option());
        if let Some(peer) = self.live() {
            return self.send(&peer, member, hook, args, state, object, sync);
        }
        if sync {
            if let Ok(Some((t, _))) = self.next_start() {
                let wait = t.saturating_duration_since(Instant::now());
                if wait <= SYNC_RESTART_WAIT {
                    std::thread::sleep(wait);
                }
            }
            return match self.peer() {
                Ok(peer) => self.send(&peer, member, hook, args, state, object, sync),
                Err(e) => HookReturn::error(e),
            };
        }
        // Owned copies (values are shared, not copied) for the wait.
        let values: Vec<Value> = args.iter().map(|v| ValueRef::to_owned(*v)).collect();
        let (state, object) = (state.cloned(), object.cloned());
        let sup = self.clone();
        HookReturn::pending(
            async move {
                let peer = match sup.wait_for_start().await {
                    Ok(p) => p,
                    Err(e) => return HookReturn::error(e),
                };
                let args: Vec<ValueRef<'_>> = values.iter().map(Value::as_ref).collect();
                let ret = sup.send(&peer, member, hook, &args, state.as_ref(), object.as_ref(), false);
                match ret.into_outcome(bub_abi::value::own_table()) {
                    Outcome::Pending(fut) => fut.await,
                    other => outcome_return(other),
                }
            }
            .into_ffi(),
        )
    }

    /// A reply to one of the host's calls as a return; the objects a
    /// provider hook answers can be revived in a restarted process.
    fn answer_of(
        self: &Arc<Self>,
        member: usize,
        hook: HookId,
        object_arg: Option<bub_abi::abi::ObjectHandle>,
        answer: Result<Answer, HookError>,
        peer: &Arc<Peer>,
    ) -> HookReturn {
        if !REVIVABLE.contains(&hook) {
            return into_return(answer, peer);
        }
        let revivable = |r: wire::ObjRef, index: usize| {
            let sup = Arc::downgrade(self);
            let object_arg = object_arg.clone();
            let revive: codec::Revive = Box::new(move || {
                let (sup, object_arg) = (sup.clone(), object_arg.clone());
                Box::pin(async move {
                    let sup = sup.upgrade().ok_or_else(|| HookError::new(ErrorKind::CLOSED, "the host is gone"))?;
                    sup.find_again(member, hook, object_arg, index).await
                })
            });
            let (object, remote) = RemoteObject::revivable(peer, r, revive);
            if hook == HookId::ProvideChannels {
                bub_abi::sync::lock(&self.eager).push(remote);
            }
            object.into_handle()
        };
        match answer {
            Ok(Answer::Object(r)) => HookReturn::object(revivable(r, 0)),
            Ok(Answer::Objects(list)) => {
                HookReturn::objects(list.into_iter().enumerate().map(|(i, r)| revivable(r, i)).collect::<RVec<_>>())
            }
            other => into_return(other, peer),
        }
    }

    /// Calls provider hook `hook` again in the running (restarted)
    /// process; the id of its `index`-th object there.
    async fn find_again(
        self: &Arc<Self>,
        member: usize,
        hook: HookId,
        object_arg: Option<bub_abi::abi::ObjectHandle>,
        index: usize,
    ) -> Result<(Arc<Peer>, u64), HookError> {
        let peer = self.wait_for_start().await?;
        let name = hook.name().to_owned();
        let object = object_arg.map(|o| peer.export(o));
        let (_, rx) = peer.request(|id| Message::Call {
            id,
            member,
            hook: name,
            args: Vec::new(),
            state: None,
            object,
            sync: true,
        });
        let gone = || {
            HookError::new(
                ErrorKind::CLOSED,
                format!("{}: after its restart, {hook} no longer answers this object", self.label()),
            )
        };
        let found = match rx.await.map_err(|_| gone())?? {
            Answer::Object(r) if index == 0 => r,
            Answer::Objects(list) => list.into_iter().nth(index).ok_or_else(gone)?,
            _ => return Err(gone()),
        };
        tracing::info!(target: "bub::isolation", "{}: its {hook} object was found again in its restarted process", self.label());
        Ok((peer, found.id))
    }

    /// The process, once its backoff passed and it started (async).
    async fn wait_for_start(self: &Arc<Self>) -> Result<Arc<Peer>, HookError> {
        if let Some((t, _)) = self.next_start()? {
            tokio::time::sleep_until(t.into()).await;
        }
        let sup = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt
                .spawn_blocking(move || sup.peer())
                .await
                .unwrap_or_else(|_| Err(HookError::new(ErrorKind::PANIC, "starting the plugin's process panicked"))),
            Err(_) => sup.peer(),
        }
    }

    /// Sends one call to `peer`; its answer, or a pending future of it.
    #[allow(clippy::too_many_arguments)]
    fn send(
        self: &Arc<Self>,
        peer: &Arc<Peer>,
        member: usize,
        hook: HookId,
        args: &[ValueRef<'_>],
        state: Option<&bub_abi::abi::StateHandle>,
        object: Option<&bub_abi::abi::ObjectHandle>,
        sync: bool,
    ) -> HookReturn {
        let args: Vec<_> = args.iter().map(|v| codec::encode(*v, peer)).collect();
        let state = state.map(|s| peer.export_state(s.clone()));
        let object_arg = object.cloned();
        let object = object.map(|o| peer.export(o.clone()));
        let make = |id| Message::Call { id, member, hook: hook.name().to_owned(), args, state, object, sync };
        if sync {
            let answer = peer.request_blocking(make, self.spec.sync_limit);
            if let Err(e) = &answer {
                if peer.closed().is_none() {
                    self.kill(
                        peer,
                        format!(
                            "{hook} (a sync hook) did not answer within {:.0} s",
                            self.spec.sync_limit.as_secs_f64()
                        ),
                    );
                    return HookReturn::error(HookError::new(e.kind, peer.closed().unwrap_or_default()));
                }
            }
            return self.answer_of(member, hook, object_arg, answer, peer);
        }
        let (id, rx) = peer.request(make);
        let limit = self.spec.async_limit.filter(|_| !matches!(hook, HookId::RunModel | HookId::RunModelStream));
        let cancel = Cancel { peer: peer.clone(), id, hook, started: Instant::now(), limit, sup: Arc::downgrade(self) };
        let peer = peer.clone();
        HookReturn::pending(
            async move {
                let answer =
                    rx.await.unwrap_or_else(|_| Err(HookError::new(ErrorKind::CLOSED, "the connection ended")));
                drop(cancel);
                into_return(answer, &peer)
            }
            .into_ffi(),
        )
    }
}

/// Provider hooks whose objects a restarted process is asked for again
/// ([`Supervisor::answer_of`]), with the calls that put them in service
/// replayed (a store's `enter`, a channel's `start`): stores, the steering
/// inbox, tools, the tape context, sidecars, and channels (started again
/// by the supervisor itself after a crash: nothing else calls them). A
/// lifespan is the scope's own; an environment or a stream belongs to one
/// call.
const REVIVABLE: &[HookId] = &[
    HookId::ProvideChannels,
    HookId::ProvideTapeStore,
    HookId::ProvideSteeringInbox,
    HookId::ProvideTools,
    HookId::BuildTapeContext,
    HookId::ProvideTapeSidecar,
];

/// How long a sync call waits for a crashed plugin's backoff.
const SYNC_RESTART_WAIT: Duration = Duration::from_secs(2);

/// An outcome back as a return.
fn outcome_return(outcome: Outcome) -> HookReturn {
    match outcome {
        Outcome::None => HookReturn::NONE,
        Outcome::Value(v) => HookReturn::value(v),
        Outcome::Object(o) => HookReturn::object(o),
        Outcome::Objects(list) => HookReturn::objects(list),
        Outcome::Error(e) => HookReturn::error(e),
        Outcome::Pending(fut) => HookReturn::pending(fut),
    }
}

/// Tells the child to stop a call whose answer is no longer awaited (the
/// turn was cancelled, or the host's deadline passed). A call given up at
/// its deadline ends the process, which starts again at its next call:
/// what runs in it past its deadline may hold it whole (a Python hook
/// blocking the bridge's loop holds every Python plugin in it, and no
/// cancellation reaches a blocking call), and isolation is what lets it be
/// ended without ending the host.
struct Cancel {
    peer: Arc<Peer>,
    id: u64,
    hook: HookId,
    started: Instant,
    limit: Option<Duration>,
    sup: Weak<Supervisor>,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.peer.is_waiting(self.id) {
            return;
        }
        self.peer.forget(self.id);
        self.peer.send(&Message::Cancel(self.id));
        // Given up at its deadline (the host's timer, started as this one).
        let at_deadline = self.limit.is_some_and(|limit| self.started.elapsed() + DEADLINE_SLACK >= limit);
        if let (true, Some(sup)) = (at_deadline, self.sup.upgrade()) {
            let limit = self.limit.unwrap_or_default().as_secs_f64();
            sup.kill(
                &self.peer,
                format!(
                    "{} did not finish within {limit:.0} s (BUB_HOOK_TIMEOUT_SECONDS); its process is ended and \
                     starts again at the next call",
                    self.hook
                ),
            );
        }
    }
}

/// How much earlier than its deadline a call given up still counts as
/// given up at it (the host's timer and this clock start a moment apart).
const DEADLINE_SLACK: Duration = Duration::from_millis(100);

pub(crate) fn into_return(answer: Result<Answer, HookError>, peer: &Arc<Peer>) -> HookReturn {
    match answer {
        Err(e) => HookReturn::error(e),
        Ok(Answer::None) => HookReturn::NONE,
        Ok(Answer::Value(raw)) => match codec::decode(&raw, peer) {
            Ok(v) => HookReturn::value(v),
            Err(e) => HookReturn::error(e),
        },
        Ok(Answer::Object(r)) => HookReturn::object(RemoteObject::object(peer, r).into_handle()),
        Ok(Answer::Objects(list)) => HookReturn::objects(
            list.into_iter().map(|r| RemoteObject::object(peer, r).into_handle()).collect::<RVec<_>>(),
        ),
        Ok(Answer::Error(kind, message)) => HookReturn::error(HookError::new(ErrorKind(kind), message)),
        // Dropped unpolled by the runtime, which warns as for any plugin.
        Ok(Answer::Pending) => HookReturn::pending(async { HookReturn::NONE }.into_ffi()),
    }
}

#[allow(unsafe_code)]
fn forward(hook: HookId, call: &HookCall<'_>) -> HookReturn {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the instances of isolated registrations are `Member`s
        // leaked by `load` (never freed), and only their slots are these.
        let member = unsafe { &*(call.instance.0 as *const Member) };
        member.sup.call(member.index, hook, call)
    }));
    result.unwrap_or_else(|_| HookReturn::error(HookError::new(ErrorKind::PANIC, "the isolation proxy panicked")))
}

macro_rules! gen_slots {
    ($( ($name:ident $Pascal:ident { $($entry:tt)* }) )*) => {
        /// The slot function of `hook`: forwards to the member's process.
        pub(super) fn slot_of(hook: HookId) -> extern "C" fn(&HookCall<'_>) -> HookReturn {
            $(
                extern "C" fn $name(call: &HookCall<'_>) -> HookReturn {
                    forward(HookId::$Pascal, call)
                }
            )*
            match hook {
                $(HookId::$Pascal => $name,)*
            }
        }
    };
}
bub_abi::for_each_hook!(gen_slots);

// The scripted test plugin, shared by tp-scripted (normal), tp-scripted-first
// (tryfirst) and tp-scripted-last (trylast): each crate sets `MARKER` and
// includes this file. It implements every hook; what a hook does comes from
// the plugin's config (its manifest), so one library, copied into several
// plugin folders, plays every part a test needs:
//
// {"trace": "/path/file",                    every call appends "<name>:<hook>"
//  "init": "error" | "panic",                the constructor fails
//  "hooks": {"<hook>": {
//     "return": <json>, "raw": "<text>",     answer (raw: verbatim, maybe not JSON)
//     "repeat": ["text", n],                 answer the text repeated n times (big answers)
//     "error": "msg", "panic": "msg",        fail
//     "async": true, "sleep_ms": n,          answer from a tokio future
//     "spawn_ms": n,                         async: answer at once, leaving a tokio task
//                                          that traces "<hook>:spawned" after n ms
//     "block_ms": n,                         (sync) block the calling thread first
//     "panic_in_future": "msg",
//     "print": "text",                       println! it (to the process's stdout)
//     "env_var": "NAME",                     answer the variable's value (null when unset)
//     "spawn_process": ["sleep", "60"],    start a subprocess first (traces "<hook>:pid:<pid>")
//     "crash": "abort" | "segfault" | "exit" | "stack_overflow",  take the process down
//                                          (also as "init": …)
//     "crash_every": [n, "segfault"],        crash on every n-th call (of any hook so
//                                          scripted) in this process
//     "connect": "127.0.0.1:port",           async: send a line over TCP, return the reply
//     "set_state": {k: v}, "get_state": "k", write / read the live turn state
//     "echo_arg": i,                         return argument i as received
//     "trace_arg": i,                        trace argument i too
//     "log": "text",                         emit tracing::info!
//     "request_ops": {...}, "tool_ops": {...}, "prefix_result": "p", "finish": "t",
//     "object": {...}, "objects": [{...}]     answer a scripted object (see `object`)
//  }}}

use std::{io::Write as _, time::Duration};

use bub_abi::{
    abi::{HookCall, HookReturn},
    sdk::bridge,
    BoxError, Hook, HookDecl, HookError, HookId, Object, ObjectFuture, ObjectImpl, Plugin, PluginContext, TurnState,
};
use serde_json::{json, Map, Value};

pub struct Scripted {
    name: String,
    hooks: Map<String, Value>,
    trace: Option<String>,
}

fn answer(value: Value) -> HookReturn {
    if value.is_null() {
        HookReturn::NONE
    } else {
        HookReturn::value(bub_abi::Value::from(&value))
    }
}

/// A value given as text: parsed by the host; text that is not JSON is a
/// `TypeError` (under ABI 2 a plugin cannot hand the host malformed data).
fn raw(text: &str) -> HookReturn {
    match bub_abi::Value::from_json(text) {
        Ok(v) => HookReturn::value(v),
        Err(e) => HookReturn::error(e),
    }
}

impl Scripted {
    fn trace(&self, line: &str) {
        if let Some(path) = &self.trace {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("trace file");
            // One write per line: O_APPEND keeps concurrent lines whole.
            f.write_all(format!("{}:{line}\n", self.name).as_bytes()).expect("trace write");
        }
    }

    fn arg(call: &HookCall<'_>, i: usize) -> Value {
        call.args.get(i).and_then(|v| v.deserialize().ok()).unwrap_or(Value::Null)
    }

    fn run(&'static self, hook: &'static str, call: &HookCall<'_>) -> HookReturn {
        let Some(script) = self.hooks.get(hook) else {
            self.trace(hook);
            return HookReturn::NONE;
        };
        // Like a Python coroutine, an async hook does nothing until awaited.
        let line = match script.get("trace_arg").and_then(Value::as_u64) {
            Some(i) => format!("{hook}:{}", Self::arg(call, i as usize)),
            None => hook.to_owned(),
        };
        let is_async = script.get("async") == Some(&Value::Bool(true));
        if !is_async {
            self.trace(&line);
        }
        if let Some(text) = script.get("log").and_then(Value::as_str) {
            tracing::info!(hook, "{text}");
        }
        let state = call.state.into_option().map(|h| TurnState::from_handle(h.clone()));
        if let (Some(state), Some(Value::Object(set))) = (&state, script.get("set_state")) {
            for (k, v) in set {
                state.set(k, v).expect("state set");
            }
        }
        if let Some(msg) = script.get("panic").and_then(Value::as_str) {
            panic!("{msg}");
        }
        if let Some(argv) = script.get("spawn_process").and_then(Value::as_array) {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            if let Some((program, rest)) = argv.split_first() {
                if let Ok(child) = std::process::Command::new(program).args(rest).spawn() {
                    self.trace(&format!("{hook}:pid:{}", child.id()));
                }
            }
        }
        if let Some(how) = script.get("crash").and_then(Value::as_str) {
            crash(how);
        }
        if let Some([n, how]) = script.get("crash_every").and_then(Value::as_array).map(Vec::as_slice) {
            // Counted per process: a restarted (isolated) plugin counts anew.
            static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let seen = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if seen.is_multiple_of(n.as_u64().unwrap_or(1).max(1)) {
                crash(how.as_str().unwrap_or("abort"));
            }
        }
        if let Some(name) = script.get("env_var").and_then(Value::as_str) {
            return answer(std::env::var(name).map(Value::String).unwrap_or(Value::Null));
        }
        if let Some(text) = script.get("print").and_then(Value::as_str) {
            // What a careless plugin does: write to the process's stdout.
            println!("{text}");
        }
        let args: Vec<Value> = (0..call.args.len()).map(|i| Self::arg(call, i)).collect();
        let raw_args: Vec<String> = call.args.iter().map(|v| v.to_json()).collect();
        if is_async {
            let script = script.clone();
            return HookReturn::pending(bridge::to_ffi(async move {
                self.trace(&line);
                if let Some(ms) = script.get("spawn_ms").and_then(Value::as_u64) {
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        self.trace(&format!("{hook}:spawned"));
                    });
                }
                if let Some(ms) = script.get("sleep_ms").and_then(Value::as_u64) {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                if let Some(addr) = script.get("connect").and_then(Value::as_str) {
                    return match self.ping(addr).await {
                        Ok(reply) => answer(Value::String(reply)),
                        Err(e) => HookReturn::error(HookError::plugin(e.to_string())),
                    };
                }
                if let Some(msg) = script.get("panic_in_future").and_then(Value::as_str) {
                    panic!("{msg}");
                }
                self.trace(&format!("{hook}:done"));
                self.respond(&script, &args, &raw_args, state.as_ref())
            }));
        }
        self.respond(script, &args, &raw_args, state.as_ref())
    }

    async fn ping(&self, addr: &str) -> std::io::Result<String> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(format!("ping {}\n", self.name).as_bytes()).await?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await?;
        Ok(line.trim_end().to_owned())
    }

    fn respond(&self, script: &Value, args: &[Value], raw_args: &[String], state: Option<&TurnState>) -> HookReturn {
        // A sync hook that blocks its thread (a hang no runtime can cancel).
        if let Some(ms) = script.get("block_ms").and_then(Value::as_u64) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let Some(msg) = script.get("error").and_then(Value::as_str) {
            return HookReturn::error(HookError::plugin(msg));
        }
        if let Some([Value::String(text), Value::Number(n)]) = script.get("repeat").and_then(Value::as_array).map(Vec::as_slice) {
            return answer(Value::String(text.repeat(n.as_u64().unwrap_or(0) as usize)));
        }
        if let Some(text) = script.get("raw").and_then(Value::as_str) {
            return raw(text);
        }
        if let Some(i) = script.get("echo_arg").and_then(Value::as_u64) {
            return raw(&raw_args[i as usize]);
        }
        if let (Some(key), Some(state)) = (script.get("get_state").and_then(Value::as_str), state) {
            return answer(state.get_value(key).unwrap_or(Value::Null));
        }
        if let Some(text) = script.get("finish").and_then(Value::as_str) {
            return answer(json!({"decision": {"action": "finish", "text": text}}));
        }
        if let Some(Value::Object(ops)) = script.get("request_ops") {
            let mut request = args[0].clone();
            if let Some(m) = ops.get("set_model") {
                request["model"] = m.clone();
            }
            if let Some(t) = ops.get("set_max_tokens") {
                request["max_tokens"] = t.clone();
            }
            if let Some(msg) = ops.get("append_message") {
                request["messages"].as_array_mut().expect("messages").push(msg.clone());
            }
            return answer(json!({"request": request}));
        }
        if let Some(Value::Object(ops)) = script.get("tool_ops") {
            let call = &args[0];
            if let Some(msg) = ops.get("deny") {
                return answer(json!({"action": "deny", "message": msg}));
            }
            if let Some(result) = ops.get("replace") {
                return answer(json!({"action": "replace", "result": result}));
            }
            let mut arguments = call["arguments"].as_object().cloned().unwrap_or_default();
            if let Some(Value::Object(set)) = ops.get("set_args") {
                arguments.extend(set.clone());
            }
            if ops.get("hops") == Some(&Value::Bool(true)) {
                let hops = arguments.get("hops").and_then(Value::as_u64).unwrap_or(0);
                arguments.insert("hops".into(), json!(hops + 1));
            }
            return answer(json!({"action": "proceed", "arguments": arguments}));
        }
        if let Some(prefix) = script.get("prefix_result").and_then(Value::as_str) {
            let current = args[1]["result"].as_str().unwrap_or_default().to_owned();
            return answer(Value::String(format!("{prefix}{current}")));
        }
        if let Some(spec) = script.get("object") {
            return HookReturn::object(self.object(spec).into_handle());
        }
        if let Some(Value::Array(specs)) = script.get("objects") {
            return HookReturn::objects(specs.iter().map(|s| self.object(s).into_handle()).collect());
        }
        answer(script.get("return").cloned().unwrap_or(Value::Null))
    }

    // {"kind": k, "name": n, "methods": {"<m>": {"return": v, "error": "msg"}}}:
    // every call is traced as "<plugin>:<name or kind>.<method>", `exit` with
    // the error it was told ("…exit(none)" / "…exit(<message>)"), a method
    // scripted `"trace_args": true` with its arguments ("…append({…})").
    // Also "unsupported": true, "echo_args": true, "sleep_ms": n, and
    // "sequence": [v1, v2, …]: the n-th call answers vn (the last one after).
    fn object(&self, spec: &Value) -> Object {
        Object::new(ScriptedObject {
            plugin: self.name.clone(),
            trace: self.trace.clone(),
            kind: spec["kind"].as_str().unwrap_or("object").to_owned(),
            name: spec["name"].as_str().unwrap_or_default().to_owned(),
            methods: spec.get("methods").and_then(Value::as_object).cloned().unwrap_or_default(),
            calls: Default::default(),
        })
    }
}

struct ScriptedObject {
    plugin: String,
    trace: Option<String>,
    kind: String,
    name: String,
    methods: Map<String, Value>,
    /// How often each method was called (for "sequence").
    calls: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl ObjectImpl for ScriptedObject {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn invoke(&self, method: &str, args: Value) -> ObjectFuture {
        let who = if self.name.is_empty() { &self.kind } else { &self.name };
        let mut line = format!("{who}.{method}");
        if method == "exit" {
            let told = args["error"]["message"].as_str().unwrap_or("none");
            line = format!("{line}({told})");
        }
        if method == "stream_event" {
            line = format!("{line}({}:{})", args["event"]["kind"].as_str().unwrap_or("?"), args["event"]["data"]);
        }
        let mut script = self.methods.get(method).cloned().unwrap_or(Value::Null);
        if let Some(answers) = script.get("sequence").and_then(Value::as_array).filter(|a| !a.is_empty()) {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(method.to_owned()).or_insert(0);
            let answer = answers[(*n).min(answers.len() - 1)].clone();
            *n += 1;
            script["return"] = answer;
        }
        if script.get("trace_args") == Some(&Value::Bool(true)) {
            line = format!("{line}({args})");
        }
        if let Some(path) = &self.trace {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("trace file");
            writeln!(f, "{}:{line}", self.plugin).expect("trace write");
        }
        Box::pin(async move {
            if let Some(ms) = script.get("sleep_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if let Some(msg) = script.get("error").and_then(Value::as_str) {
                return Err(HookError::plugin(msg));
            }
            if script.get("unsupported") == Some(&Value::Bool(true)) {
                return Err(HookError::new(bub_abi::ErrorKind::UNSUPPORTED, "no such method (scripted)"));
            }
            if script.get("echo_args") == Some(&Value::Bool(true)) {
                return Ok(args);
            }
            Ok(script.get("return").cloned().unwrap_or(Value::Null))
        })
    }
}

macro_rules! scripted_hooks {
    ($( ($name:ident $Pascal:ident {
        kind: $kind:ident,
        args: [$($idx:literal $ak:ident $arg:ident : $aty:ty),* $(,)?],
        returns: $ret:ty,
        doc: $doc:literal $(,)?
    }) )*) => {
        impl Plugin for Scripted {
            const HOOKS: &'static [HookDecl] = &[$(HookDecl::new(HookId::$Pascal, MARKER, false)),*];

            fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
                match ctx.config.get("init").and_then(Value::as_str) {
                    Some("error") => return Err(format!("{} refuses to start (scripted)", ctx.name).into()),
                    Some("panic") => panic!("{} panics in its constructor (scripted)", ctx.name),
                    Some(how @ ("abort" | "segfault" | "exit" | "stack_overflow")) => crash(how),
                    _ => {}
                }
                Ok(Scripted {
                    name: ctx.name.clone(),
                    hooks: ctx.config.get("hooks").and_then(Value::as_object).cloned().unwrap_or_default(),
                    trace: ctx.config.get("trace").and_then(Value::as_str).map(str::to_owned),
                })
            }

            $(
                fn $name(&'static self, args: bub_abi::args::$name::Args<'_>) -> Hook<bub_abi::args::$name::Return> {
                    Hook::from_return(self.run(stringify!($name), args.raw()))
                }
            )*
        }
    };
}
bub_abi::for_each_hook!(scripted_hooks);

bub_abi::export_plugin!(Scripted);

/// Takes the whole process down, as a broken plugin would.
fn crash(how: &str) {
    match how {
        "abort" => std::process::abort(),
        "exit" => std::process::exit(3),
        // SAFETY (test plugin): a deliberate invalid write, to crash.
        "segfault" => unsafe { std::ptr::null_mut::<u64>().write_volatile(1) },
        "stack_overflow" => {
            fn deeper(n: u64) -> u64 {
                let pad = [n; 64];
                std::hint::black_box(&pad);
                if std::hint::black_box(n) == u64::MAX {
                    return 0;
                }
                deeper(std::hint::black_box(n + 1)) + pad[0]
            }
            std::hint::black_box(deeper(0));
        }
        _ => {}
    }
}

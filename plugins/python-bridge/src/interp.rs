//! The embedded interpreter: started once per process, pointed at the
//! plugin venv, with one asyncio loop thread that runs every Python call.
//!
//! Why one loop thread: Bub runs every hook, channel and tool on its one
//! event loop, and Python plugins rely on it (an `AsyncIOScheduler` made in
//! a constructor, `asyncio.get_running_loop()` in a sync hook, tasks that
//! outlive the call that made them). The host calls from its own threads:
//! a call runs right there as one callback of the loop while the loop is
//! idle (`event_loop`), else it is handed to the loop (`bridge.submit`),
//! which wakes the host's future when it is done, so the host never blocks
//! on Python and Python never blocks on the host.

use std::{
    ffi::CString,
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use pyo3::{ffi, prelude::*, types::PyModule};

use crate::event_loop::{self, EventLoop};

/// The interpreter and the bridge module's entry points.
pub struct Interp {
    /// The venv the plugins come from.
    pub venv: PathBuf,
    /// The bridge's Python half (`src/bridge/*.py`), imported as `bub_rs_bridge`.
    pub module: Py<PyModule>,
    attr_dict: Py<PyAny>,
    jsonable: Py<PyAny>,
    event_loop: OnceLock<EventLoop>,
}

static INTERP: OnceLock<Result<Interp, String>> = OnceLock::new();

/// The Python version the bridge was built for (`major.minor`).
pub const PYTHON_VERSION: &str = env!("BUB_BRIDGE_PYTHON_VERSION");
/// The interpreter the bridge was built with.
pub const PYTHON: &str = env!("BUB_BRIDGE_PYTHON");
const LIBPYTHON: &str = env!("BUB_BRIDGE_LIBPYTHON");

/// The interpreter, started on first use for `venv`. A second call for
/// another venv fails: one process has one interpreter.
pub fn get(venv: &Path) -> Result<&'static Interp, String> {
    let interp = INTERP.get_or_init(|| start(venv)).as_ref().map_err(Clone::clone)?;
    if interp.venv != venv {
        return Err(format!(
            "the python bridge already runs the venv {}; one process runs one venv (asked for {})",
            interp.venv.display(),
            venv.display()
        ));
    }
    Ok(interp)
}

/// The running interpreter, if started.
pub fn running() -> Option<&'static Interp> {
    INTERP.get().and_then(|r| r.as_ref().ok())
}

/// The `major.minor` of the venv's Python (from its `pyvenv.cfg`).
pub fn venv_version(venv: &Path) -> Result<String, String> {
    let cfg = venv.join("pyvenv.cfg");
    // Read as a file that steers what runs: a regular file of the user
    // (or root), not writable by others, small (a FIFO or a link to
    // /dev/zero there would hang or exhaust the host).
    let text = bub_kit::files::read_trusted(&cfg, 64 * 1024)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| {
            format!(
                "{} is not a Python venv ({}: {e}); make one with `{} -m venv {}`",
                venv.display(),
                cfg.display(),
                PYTHON,
                venv.display()
            )
        })?;
    for line in text.lines() {
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        let key = key.trim();
        if key == "version" || key == "version_info" {
            let mut parts = value.trim().split('.');
            if let (Some(a), Some(b)) = (parts.next(), parts.next()) {
                return Ok(format!("{a}.{b}"));
            }
        }
    }
    Err(format!("{} names no Python version", cfg.display()))
}

fn start(venv: &Path) -> Result<Interp, String> {
    let version = venv_version(venv)?;
    if version != PYTHON_VERSION {
        return Err(format!(
            "the venv {} is Python {version}, but this python bridge was built for Python {PYTHON_VERSION} \
             ({PYTHON}): make the venv with that Python, or rebuild the bridge with PYO3_PYTHON pointing at \
             a Python {version}",
            venv.display()
        ));
    }
    let python = venv.join("bin/python");
    if !python.exists() {
        return Err(format!("{} is missing: the venv {} is incomplete", python.display(), venv.display()));
    }
    promote_libpython()?;
    initialize(&python)?;
    let interp = Python::attach(|py| import_bridge(py, venv)).map_err(|e| format!("python bridge: {e}"))?;
    spawn_loop(&interp)?;
    Ok(interp)
}

/// Makes libpython's symbols global: the bridge (loaded `RTLD_LOCAL` by the
/// host) pulled it in as a dependency, so compiled extension modules, which
/// leave libpython's symbols undefined, would not find them.
fn promote_libpython() -> Result<(), String> {
    if LIBPYTHON.is_empty() {
        return Ok(());
    }
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
    // SAFETY: libpython is already loaded (the bridge links it); opening it
    // again runs no initialisers, it only adds a reference with global
    // symbol visibility. The handle is leaked: the library stays for the
    // life of the process, as the interpreter does.
    match unsafe { libloading::os::unix::Library::open(Some(LIBPYTHON), flags) } {
        Ok(lib) => {
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(format!("cannot load {LIBPYTHON} with global symbols: {e}")),
    }
}

/// Starts CPython as the venv's own `python` would: with `executable` set
/// to the venv's interpreter, CPython reads `pyvenv.cfg` and puts the
/// venv's site-packages on `sys.path`. No signal handlers: Ctrl-C belongs
/// to the host.
fn initialize(python: &Path) -> Result<(), String> {
    let path = CString::new(python.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} has a NUL byte in its path", python.display()))?;
    // SAFETY: the PyConfig calls follow CPython's documented init sequence
    // (InitPythonConfig, SetBytesString, InitializeFromConfig, Clear) on a config
    // owned by this frame; `path` outlives the SetBytesString call, which
    // decodes and copies it. Initialising happens once per process (the OnceLock above). The
    // final SaveThread releases the GIL this thread holds after init, so
    // any thread may take it with `Python::attach`.
    unsafe {
        if ffi::Py_IsInitialized() != 0 {
            return Err("a Python interpreter is already running in this process".into());
        }
        let mut config = std::mem::MaybeUninit::<ffi::PyConfig>::zeroed();
        ffi::PyConfig_InitPythonConfig(config.as_mut_ptr());
        let mut config = config.assume_init();
        config.install_signal_handlers = 0;
        config.parse_argv = 0;
        let status = ffi::PyConfig_SetBytesString(&mut config, &mut config.executable, path.as_ptr());
        if ffi::PyStatus_Exception(status) != 0 {
            ffi::PyConfig_Clear(&mut config);
            return Err(format!("cannot configure Python: {}", status_text(&status)));
        }
        let status = ffi::Py_InitializeFromConfig(&config);
        ffi::PyConfig_Clear(&mut config);
        if ffi::PyStatus_Exception(status) != 0 {
            return Err(format!("cannot start Python: {}", status_text(&status)));
        }
        ffi::PyEval_SaveThread();
    }
    Ok(())
}

fn status_text(status: &ffi::PyStatus) -> String {
    if status.err_msg.is_null() {
        return format!("exit code {}", status.exitcode);
    }
    // SAFETY: CPython sets `err_msg` to a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(status.err_msg) }.to_string_lossy().into_owned()
}

/// The bridge's Python half, one file per concept, in the order they run.
/// They make one module: each later part is executed into the namespace of
/// the parts before it, so the Rust half reads and replaces every name
/// (`run_call`, `_loop`, `AttrDict`, …) on that one module, and a traceback
/// names the part's own file and line.
const BRIDGE_PARTS: [(&str, &str); 7] = [
    ("bub_rs_bridge/core.py", include_str!("bridge/core.py")),
    ("bub_rs_bridge/plugins.py", include_str!("bridge/plugins.py")),
    ("bub_rs_bridge/facades.py", include_str!("bridge/facades.py")),
    ("bub_rs_bridge/channels.py", include_str!("bridge/channels.py")),
    ("bub_rs_bridge/cli.py", include_str!("bridge/cli.py")),
    ("bub_rs_bridge/interception.py", include_str!("bridge/interception.py")),
    ("bub_rs_bridge/resources.py", include_str!("bridge/resources.py")),
];

fn import_bridge(py: Python<'_>, venv: &Path) -> PyResult<Interp> {
    let (core_file, core) = BRIDGE_PARTS[0];
    let code = CString::new(core).expect("the bridge's Python has no NUL byte");
    let file = CString::new(core_file).expect("a file name has no NUL byte");
    let module = PyModule::from_code(py, &code, &file, c"bub_rs_bridge")?;
    py.import("sys")?.getattr("modules")?.set_item("bub_rs_bridge", &module)?;
    module.add_function(pyo3::wrap_pyfunction!(cancelling, &module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(event_loop::run_call, &module)?)?;
    let builtins = py.import("builtins")?;
    let (compile, exec) = (builtins.getattr("compile")?, builtins.getattr("exec")?);
    for (file, source) in &BRIDGE_PARTS[1..] {
        exec.call1((compile.call1((*source, *file, "exec"))?, module.dict()))?;
    }
    Ok(Interp {
        venv: venv.to_owned(),
        attr_dict: module.getattr("AttrDict")?.unbind(),
        jsonable: module.getattr("jsonable")?.unbind(),
        event_loop: OnceLock::new(),
        module: module.unbind(),
    })
}

/// `bridge.cancelling()`: whether a cancellation the host asked for has
/// not reached its Python task yet (calls queued behind it wait).
#[pyfunction]
fn cancelling() -> bool {
    crate::call::cancelling()
}

fn spawn_loop(interp: &Interp) -> Result<(), String> {
    let module = Python::attach(|py| interp.module.clone_ref(py));
    std::thread::Builder::new()
        .name("bub-python-loop".into())
        .spawn(move || {
            event_loop::mark_loop_thread();
            Python::attach(|py| {
                if let Err(e) = module.bind(py).call_method0("run_loop") {
                    tracing::error!("python bridge: the asyncio loop stopped: {}", traceback(py, &e));
                }
            });
        })
        .map_err(|e| format!("cannot start the Python loop thread: {e}"))?;
    let ready = Python::attach(|py| {
        let module = interp.module.bind(py);
        // Wait with the GIL released: the loop thread needs it to start.
        let wait = module.getattr("wait_ready")?;
        wait.call1((10.0,))?.extract::<bool>()
    })
    .map_err(|e| format!("python bridge: {e}"))?;
    if !ready {
        return Err("the Python loop thread did not start within 10 s".into());
    }
    let event_loop = Python::attach(|py| EventLoop::new(py, interp.module.bind(py)))
        .map_err(|e| format!("python bridge: the asyncio loop: {e}"))?;
    let _ = interp.event_loop.set(event_loop);
    Ok(())
}

impl Interp {
    /// A new empty `AttrDict`.
    pub fn attr_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        Ok(self.attr_dict.bind(py).call0()?.cast_into::<pyo3::types::PyDict>()?)
    }

    /// `bridge.jsonable(obj)`: (whether it has a JSON form, that form).
    pub fn jsonable<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<(bool, Bound<'py, PyAny>)> {
        self.jsonable.bind(obj.py()).call1((obj,))?.extract()
    }

    /// The loop every call runs on (set before the interpreter is handed
    /// out: `start` fails without it).
    pub fn event_loop(&self) -> &EventLoop {
        self.event_loop.get().expect("the python bridge's loop is set up in start()")
    }

    /// The bridge module.
    pub fn module<'py>(&self, py: Python<'py>) -> &Bound<'py, PyModule> {
        self.module.bind(py)
    }
}

/// A Python exception with its traceback, as text for the log.
pub fn traceback(py: Python<'_>, err: &PyErr) -> String {
    let formatted = (|| -> PyResult<String> {
        let module = py.import("traceback")?;
        let lines = module.call_method1("format_exception", (err.value(py),))?;
        let text: Vec<String> = lines.extract()?;
        Ok(text.concat())
    })();
    formatted.unwrap_or_else(|_| err.to_string()).trim_end().to_owned()
}

/// Keeps a Python thread state for the calling thread from now on: PyO3
/// takes the GIL with `PyGILState_Ensure`, which on a thread without one
/// makes a thread state and frees it again on release — per call, a large
/// part of a cheap hook's cost. The thread state stays until the thread
/// ends (host threads are a fixed pool). Not on a thread that holds the
/// GIL (a host call made from Python that dispatches a hook).
pub fn keep_thread_state() {
    thread_local! {
        static KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if KEPT.with(|k| k.get()) || running().is_none() {
        return;
    }
    // SAFETY: the interpreter is running (checked above). GILState_Check
    // says whether this thread holds the GIL; only when it does not, Ensure
    // takes it (making this thread's state, counter 1) and SaveThread
    // releases it again, leaving the state in place: later Ensure/Release
    // pairs (PyO3's) then only take and give back the GIL.
    unsafe {
        if ffi::PyGILState_Check() != 0 {
            return;
        }
        let _ = ffi::PyGILState_Ensure();
        ffi::PyEval_SaveThread();
    }
    KEPT.with(|k| k.set(true));
}

/// The bound of a call waited for on a thread (a sync dispatch).
pub const SYNC_CALL_LIMIT: Duration = Duration::from_secs(300);

//! The `bub` command line. All logic lives in the library and `cli/`.

#![forbid(unsafe_code)]

mod cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // An isolated plugin's process: before anything reads the environment
    // or a `.env` (it gets only what its plugin is configured with).
    if std::env::args_os().nth(1).is_some_and(|a| a == bub_host::isolation::RUNNER_ARG) {
        cli::init_logging(0);
        return bub_host::isolation::child_main();
    }
    quiet_output_errors();
    raise_open_file_limit();
    // Before any thread starts: the variables join the process's, for the
    // settings and for every command the tools run.
    cli::dotenv::load();
    cli::run()
}

/// Raises the soft limit of open files to the hard one. The soft limit is
/// often 1,024 while the hard one is far higher: a gateway serving its
/// channels' connections, tapes, plugins and shells then runs out at the
/// soft one, and a turn that answered could not write its tape. Raising
/// it is what servers do at start (nginx's `worker_rlimit_nofile`, Go's
/// runtime); the listeners' connection caps keep peers well below it.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            eprintln!("warning: cannot raise the open-file limit from {:?} to {:?}: {e}", limit.current, limit.maximum);
        }
    }
}

/// `println!` panics when standard output fails. A reader that went away
/// (`bub run … | head`) ends the run quietly with status 0, as ripgrep
/// does; any other output failure (a full disk) is one line and status 1,
/// not a backtrace. Every other panic keeps the default report.
fn quiet_output_errors() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(cause) = message.strip_prefix("failed printing to stdout: ") {
            if cause.contains("Broken pipe") {
                std::process::exit(0);
            }
            eprintln!("error: cannot write the output: {cause}");
            std::process::exit(1);
        }
        default(info);
    }));
}

//! The `bub` command line. All logic lives in the library and `cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}

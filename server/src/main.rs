//! `psbx`: the server and its operator commands (see `psbx --help`).

fn main() -> std::process::ExitCode {
    match psbx_server::commands::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("psbx: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! The `boxd` binary, started at boot inside every box: `--version`, or the
//! agent itself ([`boxd::run`]; the library's docs say what it does).

fn main() {
    if std::env::args().any(|a| a == "--version") {
        println!("boxd {}", boxd::VERSION);
        return;
    }
    if let Err(e) = boxd::run() {
        eprintln!("boxd: {e}");
        std::process::exit(1);
    }
}

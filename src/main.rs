use clap::Parser;
use std::process::ExitCode;

/// mimalloc: the gateway's hot path allocates per message (JSON, HTTP, SQL
/// rows) on several threads; glibc's malloc spent ~30% of its CPU there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    use std::io::IsTerminal;
    // Failures reach the user as `error: …`; other logs are opt-in (BUB_LOG=info).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("BUB_LOG").unwrap_or_else(|_| "error".into()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = bub::cli::Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bub::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

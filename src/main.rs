use clap::Parser;
use std::process::ExitCode;

/// mimalloc: the gateway's hot path allocates per message (JSON, HTTP, SQL
/// rows) on several threads; glibc's malloc spent ~30% of its CPU there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3's `mi_option_purge_delay` (its position in `mi_option_e`).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory freed by the gateway goes back to the system at once instead of a
/// second later (mimalloc 3's default): after a burst over ten thousand
/// sessions the process holds 43 MB instead of 48, at no measured cost in CPU.
/// `MIMALLOC_PURGE_DELAY` still overrides it.
#[expect(unsafe_code, reason = "mimalloc's options are set through its C API only (libmimalloc-sys)")]
fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an integer option; mimalloc reads options at any time.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
    }
}

fn main() -> ExitCode {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    purge_freed_memory_at_once();
    let cli = bub::cli::Cli::parse();
    // Failures reach the user as `error: …`; other logs are opt-in (BUB_LOG=info).
    let mut logs = match bub::cli::log_settings() {
        Ok(logs) => logs,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(bub::cli::exit::NOT_CONFIGURED);
        }
    };
    logs.ansi = std::io::stderr().is_terminal();
    // Traces only when an endpoint is configured: otherwise no layer at all,
    // and the subscriber is the log lines alone.
    let traces = match bub::cli::trace_settings(&cli).map(|settings| bub::telemetry::traces::layer(&settings)) {
        None => {
            tracing_subscriber::registry().with(logs.layer(std::io::stderr)).init();
            None
        }
        Some(Ok((export, traces))) => {
            logs.trace_id = Some(bub::telemetry::traces::current_trace_id);
            tracing_subscriber::registry().with(logs.layer(std::io::stderr)).with(export).init();
            Some(traces)
        }
        Some(Err(error)) => {
            eprintln!("{}", logs.format.user_line(tracing::Level::ERROR, &format!("error: {error}")));
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!(
                "{}",
                logs.format
                    .user_line(tracing::Level::ERROR, &format!("error: cannot start the async runtime: {error}"))
            );
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(bub::cli::run(cli));
    // Not waiting for tasks still blocked (a prompt reading stdin): bub has
    // stopped what it ran and recorded it.
    runtime.shutdown_background();
    // After the runtime (the exporter's client blocks), SIGTERM's graceful
    // stop included: the spans still queued are sent.
    if let Some(traces) = traces
        && let Err(error) = traces.shutdown()
    {
        eprintln!("{}", logs.format.user_line(tracing::Level::ERROR, &format!("error: {error}")));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let quiet = error.downcast_ref::<bub::cli::Exit>().is_some_and(|exit| exit.message.is_empty());
            if !quiet {
                eprintln!("{}", logs.format.user_line(tracing::Level::ERROR, &format!("error: {error:#}")));
            }
            ExitCode::from(bub::cli::exit::status_of(&error))
        }
    }
}

#[cfg(test)]
mod tests {
    /// The option number is mimalloc's purge delay: the only option whose
    /// default is 1,000 (ms) in mimalloc 3, and what the setting changes.
    #[test]
    #[expect(unsafe_code, reason = "mimalloc's options are read through its C API only (libmimalloc-sys)")]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads and writes an integer option.
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(super::PURGE_DELAY), 1000);
            super::purge_freed_memory_at_once();
            assert_eq!(libmimalloc_sys::mi_option_get(super::PURGE_DELAY), 0);
        }
    }
}

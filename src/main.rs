//! The `droid-pool` binary: flags → config → `app::run`. Exit codes live here only.

use anyhow::Context;
use clap::Parser;
use droid_pool::config::{Cli, Config, LogFormat};
use droid_pool::logs::OneLine;

// Per-transaction allocations (round futures, waiter channels) are small and short-lived;
// mimalloc's thread-local free lists serve them faster than glibc's malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = Config::load(&cli).context("loading configuration")?;
    init_tracing(config.log.format);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let stopped = runtime.block_on(droid_pool::app::run(config, std::sync::Arc::new(cli)))?;
    // Exit 0 only when the drain finished before its deadline; 2 for a second signal.
    std::process::exit(match stopped {
        droid_pool::app::Stopped::Drained => 0,
        droid_pool::app::Stopped::Forced => 1,
        droid_pool::app::Stopped::Interrupted => 2,
    })
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // One line per event whatever a field holds (names clients chose are escaped at the source).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(OneLine::new(std::io::stderr, ansi))
        .with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

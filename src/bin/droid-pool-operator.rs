//! `droid-pool-operator`: prints the CRD (`crd`) or runs the controller (`run`, the default).
//! The only place of this binary where exit codes are decided.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use droid_pool::operator::leader::LeaseConfig;
use droid_pool::operator::policy::Allowlist;
use droid_pool::operator::run::{run, RunOptions};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "droid-pool-operator",
    version,
    about = "Kubernetes operator for droid-pool"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the PoolConfig CustomResourceDefinition as YAML.
    Crd,
    /// Print the objects the operator would write for the PoolConfigs in FILE (YAML, several
    /// documents allowed; other kinds are skipped), without a cluster. A PoolConfig the
    /// allowlists refuse is an error, as the operator would refuse it.
    Render {
        /// A file of PoolConfigs (`-`: standard input).
        file: std::path::PathBuf,
        /// The poolers a `maxServerConnections` budget is split over.
        #[arg(long, default_value_t = 1)]
        poolers: u32,
    },
    /// Run the controller (the default).
    Run,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Address of /metrics, /livez and /readyz.
    #[arg(
        long,
        env = "METRICS_ADDR",
        default_value = "0.0.0.0:8080",
        global = true
    )]
    metrics_addr: SocketAddr,
    /// Watch PoolConfigs in these namespaces only, comma-separated (default: all namespaces).
    /// Each is watched through namespaced APIs: a Role and RoleBinding in each is all the
    /// RBAC this needs (no ClusterRole).
    #[arg(
        long = "namespaces",
        alias = "namespace",
        env = "WATCH_NAMESPACE",
        value_delimiter = ',',
        global = true
    )]
    namespaces: Vec<String>,
    /// Images a PoolConfig's deployment target may run, comma-separated; `*` matches any
    /// characters (default: the operator's own repository,
    /// ghcr.io/droid-pool/droid-pool:* and @*).
    #[arg(long, env = "ALLOWED_IMAGES", value_delimiter = ',', global = true)]
    allowed_images: Vec<String>,
    /// ServiceAccounts a PoolConfig may run its poolers as (`podTemplate.serviceAccountName`),
    /// comma-separated NAME or NAMESPACE/NAME patterns with `*` (default: none; unset, the
    /// operator makes each PoolConfig a ServiceAccount without an API token).
    #[arg(
        long,
        env = "ALLOWED_SERVICE_ACCOUNTS",
        value_delimiter = ',',
        global = true
    )]
    allowed_service_accounts: Vec<String>,
    /// Namespace of the leader Lease (default: the kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE", global = true)]
    lease_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, default_value = "droid-pool-operator", global = true)]
    lease_name: String,
    /// This replica's identity in the Lease and in Events (default: the host name).
    #[arg(long, env = "POD_NAME", global = true)]
    identity: Option<String>,
    /// Run without leader election (only ever one replica).
    #[arg(long, global = true)]
    no_leader_election: bool,
    /// Log lines as JSON.
    #[arg(long, env = "LOG_JSON", global = true)]
    log_json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crd) => match droid_pool::operator::crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot print the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Render { file, poolers }) => match render_file(&file, poolers, &cli.run) {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::FAILURE
            }
        },
        Some(Command::Run) | None => serve(cli.run),
    }
}

/// The objects for every PoolConfig in `file`, as YAML documents. A PoolConfig read from a
/// file has no uid or namespace yet: placeholders stand in (the owner reference needs one).
fn render_file(file: &std::path::Path, poolers: u32, args: &RunArgs) -> anyhow::Result<String> {
    use serde::Deserialize;
    let allow = allowlist(args)?;
    let text = if file == std::path::Path::new("-") {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file)?
    };
    let mut out = String::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc)?;
        if value.get("kind").and_then(|k| k.as_str()) != Some("PoolConfig") {
            continue;
        }
        let mut pc: droid_pool::operator::crd::PoolConfig = serde_json::from_value(value)?;
        pc.metadata
            .namespace
            .get_or_insert_with(|| "default".into());
        pc.metadata
            .uid
            .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
        if let Err(refused) = allow.check(&pc) {
            anyhow::bail!("{}: {}", refused.reason, refused.message);
        }
        for obj in droid_pool::operator::render::preview(&pc, poolers)? {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&obj)?);
        }
    }
    Ok(out)
}

fn serve(args: RunArgs) -> ExitCode {
    init_logging(args.log_json);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(controller(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "operator stopped");
            ExitCode::FAILURE
        }
    }
}

async fn controller(args: RunArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let identity = args.identity.clone().unwrap_or_else(hostname);
    let lease = (!args.no_leader_election).then(|| {
        let ns = args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        LeaseConfig::new(ns, args.lease_name.clone(), identity.clone())
    });
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;
    let opts = RunOptions {
        metrics_addr: args.metrics_addr,
        namespaces: namespaces(&args.namespaces),
        allow: allowlist(&args)?,
        lease,
        instance: Some(identity),
    };
    run(client, opts, shutdown, |_| {}).await?;
    Ok(())
}

/// The namespaces given, without blanks (an empty `WATCH_NAMESPACE` means every namespace).
fn namespaces(given: &[String]) -> Vec<String> {
    given
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

fn allowlist(args: &RunArgs) -> anyhow::Result<Allowlist> {
    let clean = |v: &[String]| -> Vec<String> { namespaces(v) };
    Ok(Allowlist::new(
        &clean(&args.allowed_images),
        &clean(&args.allowed_service_accounts),
    )?)
}

/// SIGTERM or SIGINT cancels the token: the controller drains its work and releases the Lease.
/// (The controller's own `shutdown_on_signal` is not used: one token drives everything.)
fn spawn_signal_handler(shutdown: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        shutdown.cancel();
    });
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("droid-pool-operator-{}", std::process::id()))
}

/// Logs go to stderr, as the pooler's: colour codes only when stderr is a terminal, so that
/// `kubectl logs` and a log shipper read plain text (or JSON with --log-json).
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

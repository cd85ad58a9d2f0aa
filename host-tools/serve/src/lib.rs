//! `sprout-serve`: the edge service behind `sprout serve`. An HTTP API (JSON under `/api/v1`,
//! an OpenAPI document at `/api/v1/openapi.json`, `/healthz`) over a data folder holding an
//! SQLite database and content-addressed files: labelled image data sets, a persistent queue
//! of fine-tuning jobs that run as child `sprout train` processes and survive restarts, and a
//! model registry with versions, promotion and batched predictions; and a web page at `/`
//! for all of it.
//!
//! The service calls the `sprout` binary it is part of ([`Config::sprout`]) for training, so
//! a crashing or out-of-memory job never takes the API down.

mod api;
mod auth;
mod boards;
mod datasets;
mod db;
mod drain;
mod error;
mod estimate;
mod events;
mod jobs;
mod layout;
mod models;
mod names;
mod openapi;
mod params;
mod predict;
mod runner;
mod store;
mod tls;
mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

pub use auth::{create_token, Scope};

/// What `sprout serve` starts with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The folder holding the database, images, models and job folders (created if missing).
    pub data_dir: PathBuf,
    /// Where to listen, e.g. `127.0.0.1:8080` (port 0: any free port).
    pub listen: SocketAddr,
    /// The `sprout` binary jobs run as (`sprout train ...`).
    pub sprout: PathBuf,
    /// How many jobs train at once.
    pub runners: usize,
    /// Bytes one request body may hold (an upload of many images, a model, a picture).
    pub max_body_bytes: usize,
    /// Memory the jobs running at once may use together (`None`: what the system reports
    /// available when a job is created).
    pub memory_limit: Option<u64>,
    /// HTTPS with this PEM certificate chain and private key (`None`: plain HTTP).
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl Config {
    /// Defaults for `data_dir` and `sprout`: loopback port 8080, one runner, 256 MiB bodies.
    pub fn new(data_dir: PathBuf, sprout: PathBuf) -> Self {
        Self {
            data_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            sprout,
            runners: 1,
            max_body_bytes: 256 << 20,
            memory_limit: None,
            tls: None,
        }
    }
}

/// Runs the service until Ctrl-C or SIGTERM (then at most [`GRACE`] longer): opens (and migrates) the data folder, resumes
/// interrupted jobs, starts the runners, prints `listening on http://ADDR` (`https://` with
/// TLS) on standard output once the socket is bound.
pub fn serve(config: Config) -> anyhow::Result<()> {
    // A bad certificate or key is refused before anything else happens.
    let tls = match &config.tls {
        Some((cert, key)) => Some(tls::server_config(cert, key)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let state = api::State::open(&config)?;
        let resumed = runner::requeue_interrupted(&state)?;
        if resumed > 0 {
            eprintln!(
                "{resumed} interrupted job(s) queued again, to resume from their checkpoints"
            );
        }
        runner::start(&state, config.runners);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        match tls {
            Some(tls) => {
                let listener = tls::TlsListener::new(listener, tls)
                    .context("the bound socket has no address")?;
                run(listener, "https", state).await
            }
            None => run(listener, "http", state).await,
        }
    })
}

/// Serves the API on `listener` (reached by `scheme`) until Ctrl-C or SIGTERM.
async fn run<L>(listener: L, scheme: &str, state: api::AppState) -> anyhow::Result<()>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let address = listener.local_addr().context("the bound socket has no address")?;
    println!("listening on {scheme}://{address}");
    use std::io::Write;
    std::io::stdout().flush().context("cannot write to standard output")?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopping = Arc::clone(&stop);
    let server = axum::serve(listener, api::router(state))
        .with_graceful_shutdown(async move { stopping.notified().await });
    // Event streams of running jobs stay open: after the signal, requests in flight get
    // a grace period, then the process exits (its jobs resume on the next start).
    tokio::select! {
        result = server => result.context("the HTTP server failed"),
        () = async {
            shutdown().await;
            stop.notify_one();
            tokio::time::sleep(GRACE).await;
        } => Ok(()),
    }
}

/// How long requests in flight may take to finish after Ctrl-C or SIGTERM.
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

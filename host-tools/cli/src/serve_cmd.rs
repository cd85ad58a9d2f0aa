//! `sprout serve`: runs the edge service (`sprout-serve`) on a data folder, and
//! `sprout serve token create` makes the bearer tokens it asks for.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sprout_serve::{Config, Scope};

use crate::size::parse_size;

#[derive(Args, Debug)]
#[command(subcommand_negates_reqs = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    /// The data folder: sprout.db, images/, models/, jobs/ (created if missing).
    #[arg(long, value_name = "DIR", required = true)]
    data_dir: Option<PathBuf>,
    /// Address and port to listen on (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// How many jobs train at once, each in its own process.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    runners: u64,
    /// The most bytes one request may send (an upload of many images, a model): larger
    /// ones are answered 413.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    max_body: usize,
    /// Memory the running jobs may use together (default: what the machine has available
    /// when a job is created); a job estimated above what is left is refused.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory_limit: Option<usize>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key. Plain HTTP sent to
    /// the port is then not answered.
    #[arg(long, value_name = "CERT.pem", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, value_name = "KEY.pem", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum ServeCommand {
    /// Manage the bearer tokens of a data folder.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Create a token and print it (once: only its hash is stored).
    Create(TokenCreateArgs),
}

#[derive(Args, Debug)]
struct TokenCreateArgs {
    /// The data folder of the service.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// read (look, predict), train (also upload, train, promote) or admin (also tokens).
    #[arg(long, value_parser = Scope::parse)]
    scope: Scope,
    /// What the token is for.
    #[arg(long, default_value = "")]
    label: String,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    match &args.command {
        Some(ServeCommand::Token(TokenCommand::Create(create))) => {
            let token = sprout_serve::create_token(&create.data_dir, create.scope, &create.label)?;
            println!("{token}");
            Ok(())
        }
        None => {
            let data_dir = args.data_dir.clone().context("--data-dir is required")?;
            let sprout = std::env::current_exe().context("cannot find the sprout binary itself")?;
            let mut config = Config::new(data_dir, sprout);
            config.listen = args.listen;
            config.runners = args.runners as usize;
            config.max_body_bytes = args.max_body;
            config.memory_limit = args.memory_limit.map(|b| b as u64);
            config.tls = args.tls_cert.clone().zip(args.tls_key.clone());
            sprout_serve::serve(config)
        }
    }
}

//! HTTPS for `sprout serve --tls-cert --tls-key`: the PEM certificate chain and private key
//! loaded into rustls (with the ring provider), and a listener that accepts TCP connections
//! and completes each TLS handshake on a task of its own (at most [`HANDSHAKE`] long),
//! handing the HTTP server only the connections whose handshake succeeded: plain HTTP sent
//! to the port gets no answer.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Connections with a finished handshake that may wait for the HTTP server.
const WAITING: usize = 64;

/// The TLS configuration of certificate chain `cert` and private key `key` (PEM files),
/// with errors naming the file at fault.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the TLS certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", cert.display()))?;
    if chain.is_empty() {
        bail!("{}: no certificate in it (expected PEM 'BEGIN CERTIFICATE' blocks)", cert.display());
    }
    let private = PrivateKeyDer::from_pem_file(key).with_context(|| {
        format!("{}: no usable private key (expected a PEM private key)", key.display())
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no safe protocol version")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .with_context(|| {
            format!("the TLS key {} cannot serve the certificate {}", key.display(), cert.display())
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections come out TLS-wrapped.
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` (from now on, on a task of its own) with `config`.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, incoming) = mpsc::channel(WAITING);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            while !sender.is_closed() {
                let (stream, peer) = match listener.accept().await {
                    Ok(connection) => connection,
                    Err(error) => {
                        // Out of descriptors, say: wait a little rather than spin.
                        eprintln!("cannot accept a connection: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream));
                    if let Ok(Ok(tls)) = handshake.await {
                        let _ = sender.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(Self { incoming, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The accepting task ended: no connection will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

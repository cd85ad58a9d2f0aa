//! Firmware under `qemu-system-arm`: finds QEMU (installing its Debian package when missing),
//! runs an ELF on the `mps2-an386` machine (Cortex-M4F) with semihosting, a timeout, bytes
//! for its UART and optionally `-icount shift=0`, and decodes its defmt log with the ELF's
//! own defmt table.
//!
//! The firmware's defmt frames reach QEMU's stdout (semihosting writes to `:tt` go to the
//! host's stdout); UART0 is a Unix socket QEMU connects to, so the two never mix. A
//! firmware that serves the host link instead runs as an [`Emulation`] whose UART0 is a
//! TCP server socket (`sprout device --port tcp:127.0.0.1:PORT`), under `-icount shift=0`
//! so that the clock it reads counts its instructions.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use defmt_decoder::{DecodeError, Table};

use crate::debian;

/// The emulator and the machine sprout's CI firmware runs on.
pub const QEMU: &str = "qemu-system-arm";
pub const MACHINE: &str = "mps2-an386";

/// Returns once `qemu-system-arm` runs, installing it with apt-get when it is missing.
pub fn ensure_installed(root: &Path) -> Result<()> {
    debian::ensure(root, &[debian::Tool { program: QEMU, package: "qemu-system-arm" }])
}

/// How to run a firmware image.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes sent to UART0 (QEMU's first serial port).
    pub uart_input: Vec<u8>,
    /// Run with `-icount shift=0`: the virtual clock counts executed instructions.
    pub icount: bool,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// A file QEMU's loader places in the machine's memory before reset, and where.
    pub load: Option<(PathBuf, u32)>,
    /// The folder QEMU runs in: where the firmware's semihosting files go.
    pub dir: Option<PathBuf>,
    /// The firmware writes plain text (not defmt) to semihosting's console.
    pub text_log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            uart_input: Vec::new(),
            icount: false,
            timeout: Duration::from_secs(120),
            load: None,
            dir: None,
            text_log: false,
        }
    }
}

/// What a run left behind.
#[derive(Debug)]
pub struct Run {
    /// QEMU's exit status: the firmware's semihosting exit (0 success, 1 failure).
    pub code: i32,
    /// Everything the firmware wrote to UART0.
    pub uart: Vec<u8>,
    /// The decoded defmt log, one line per frame (`LEVEL message` or the bare message).
    pub log: Vec<String>,
    /// What QEMU itself printed on stderr.
    pub stderr: String,
}

impl Run {
    /// Fails, showing the log, unless the firmware exited with success.
    pub fn expect_success(&self, elf: &Path) -> Result<()> {
        if self.code == 0 {
            return Ok(());
        }
        bail!(
            "{} exited with {} under QEMU\n--- defmt log ---\n{}\n--- qemu stderr ---\n{}",
            elf.display(),
            self.code,
            self.log.join("\n"),
            self.stderr.trim_end()
        )
    }
}

/// The QEMU command for `elf` on the mps2-an386 machine with semihosting, UART0 on
/// `serial` (a `-serial` argument).
fn command(elf: &Path, serial: &str, icount: bool) -> Command {
    let mut command = Command::new(QEMU);
    command
        .args(["-machine", MACHINE, "-cpu", "cortex-m4", "-display", "none", "-monitor", "none"])
        .args(["-serial", serial, "-semihosting-config", "enable=on,target=native"]);
    if icount {
        command.args(["-icount", "shift=0"]);
    }
    command.arg("-kernel").arg(elf);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// A firmware running in the background with UART0 on a local TCP port.
pub struct Emulation {
    child: Child,
    table: Table,
    elf: PathBuf,
    defmt: Option<JoinHandle<std::io::Result<Vec<u8>>>>,
    stderr: Option<JoinHandle<std::io::Result<Vec<u8>>>>,
    /// The port UART0 listens on (`tcp:127.0.0.1:PORT`).
    pub port: u16,
}

impl Emulation {
    /// Starts `elf` with UART0 as a TCP server on a free local port, and waits until it
    /// listens.
    pub fn start(elf: &Path) -> Result<Self> {
        let table = defmt_table(elf)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .context("finding a free local port for UART0")?
            .port();
        // No Nagle delay on the replies: the link exchanges small frames, each awaiting the
        // last one's acknowledgement.
        let serial = format!("tcp:127.0.0.1:{port},server=on,wait=off,nodelay=on");
        let mut child =
            command(elf, &serial, true).spawn().with_context(|| format!("starting {QEMU}"))?;
        let defmt = Some(drain(child.stdout.take().context("QEMU's stdout")?));
        let stderr = Some(drain(child.stderr.take().context("QEMU's stderr")?));
        let mut emulation = Self { child, table, elf: elf.to_path_buf(), defmt, stderr, port };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if emulation.child.try_wait()?.is_some() || start.elapsed() > Duration::from_secs(10) {
                let log = emulation.stop()?;
                bail!("QEMU never listened on UART0's port {port}\n{}", log.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(emulation)
    }

    /// `tcp:127.0.0.1:PORT`, as `sprout device --port` takes it.
    pub fn port_spec(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.port)
    }

    /// Ends the emulation and returns the firmware's decoded defmt log.
    pub fn stop(mut self) -> Result<Vec<String>> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = self.stderr.take().map(join).transpose()?.unwrap_or_default();
        let defmt = self.defmt.take().map(join).transpose()?.unwrap_or_default();
        decode(&self.table, &defmt).with_context(|| {
            format!(
                "decoding the defmt log of {} (qemu: {})",
                self.elf.display(),
                String::from_utf8_lossy(&stderr).trim_end()
            )
        })
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn defmt_table(elf: &Path) -> Result<Table> {
    let image = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    Table::parse(&image)
        .with_context(|| format!("reading the defmt table of {}", elf.display()))?
        .ok_or_else(|| anyhow!("{} has no defmt table (not a defmt firmware?)", elf.display()))
}

/// Runs `elf` on the mps2-an386 machine with semihosting and decodes its defmt log.
pub fn run(elf: &Path, options: &Options) -> Result<Run> {
    let table = if options.text_log { None } else { Some(defmt_table(elf)?) };
    let socket = uart_socket(elf);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .with_context(|| format!("opening the UART socket {}", socket.display()))?;
    let mut command = command(elf, "chardev:uart", options.icount);
    command.arg("-chardev").arg(format!("socket,id=uart,path={}", socket.display()));
    if let Some((file, address)) = &options.load {
        let file = file.to_str().with_context(|| format!("{} is not UTF-8", file.display()))?;
        // QEMU's option syntax doubles a comma inside a value.
        let file = file.replace(',', ",,");
        command.args(["-device", &format!("loader,file={file},addr={address:#x},force-raw=on")]);
    }
    if let Some(dir) = &options.dir {
        command.current_dir(dir);
    }
    let start = Instant::now();
    let mut child = command.spawn().with_context(|| format!("starting {QEMU}"))?;
    let defmt = drain(child.stdout.take().context("QEMU's stdout")?);
    let stderr = drain(child.stderr.take().context("QEMU's stderr")?);
    let uart = match accept(&listener, &mut child, options.timeout) {
        Ok(mut stream) => {
            stream.write_all(&options.uart_input).context("sending UART input to QEMU")?;
            Some(drain(stream))
        }
        Err(error) => {
            let _ = child.kill();
            eprintln!("{error:#}");
            None
        }
    };
    let code = wait(&mut child, options.timeout.saturating_sub(start.elapsed()));
    let _ = std::fs::remove_file(&socket);
    let stderr = String::from_utf8_lossy(&join(stderr)?).into_owned();
    let uart = match uart {
        Some(uart) => join(uart)?,
        None => bail!("QEMU never connected to its UART socket\n{stderr}"),
    };
    let output = join(defmt)?;
    let log = match &table {
        Some(table) => decode(table, &output)
            .with_context(|| format!("decoding the defmt log of {}", elf.display()))?,
        None => String::from_utf8_lossy(&output).lines().map(str::to_string).collect(),
    };
    match code {
        Some(code) => Ok(Run { code, uart, log, stderr }),
        None => bail!(
            "{} did not finish within {:?} under QEMU\n--- defmt log ---\n{}",
            elf.display(),
            options.timeout,
            log.join("\n")
        ),
    }
}

/// Waits for QEMU to connect to the UART socket (it does so as it starts).
fn accept(listener: &UnixListener, child: &mut Child, timeout: Duration) -> Result<UnixStream> {
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                if start.elapsed() > timeout || child.try_wait()?.is_some() {
                    bail!("QEMU exited or timed out before connecting to its UART");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => return Err(error).context("accepting QEMU's UART connection"),
        }
    }
}

/// The UART socket of a run: beside the ELF.
fn uart_socket(elf: &Path) -> PathBuf {
    let mut name = elf.file_name().unwrap_or_default().to_os_string();
    name.push(".uart");
    elf.with_file_name(name)
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<std::io::Result<Vec<u8>>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).map(|_| bytes)
    })
}

fn join(reader: JoinHandle<std::io::Result<Vec<u8>>>) -> Result<Vec<u8>> {
    reader.join().map_err(|_| anyhow!("a QEMU output reader panicked"))?.context("reading QEMU")
}

/// The exit code, or `None` when the run was killed at the timeout.
fn wait(child: &mut Child, timeout: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.code().unwrap_or(-1)),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Decodes a defmt byte stream into lines.
pub fn decode(table: &Table, bytes: &[u8]) -> Result<Vec<String>> {
    let mut decoder = table.new_stream_decoder();
    decoder.received(bytes);
    let mut lines = Vec::new();
    loop {
        match decoder.decode() {
            Ok(frame) => lines.push(match frame.level() {
                Some(level) => {
                    format!("{} {}", level.as_str().to_uppercase(), frame.display_message())
                }
                None => frame.display_message().to_string(),
            }),
            Err(DecodeError::UnexpectedEof) => return Ok(lines),
            Err(DecodeError::Malformed) => {
                bail!("malformed defmt frame after {} lines: {}", lines.len(), lines.join("\n"))
            }
        }
    }
}

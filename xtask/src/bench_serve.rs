//! `cargo xtask bench serve`: the edge service under load on loopback. Starts the release
//! `sprout serve` on a fresh data folder, trains a leafnet head on synthetic leaf photos
//! through the API, then runs 64 concurrent predict clients and 8 concurrent uploaders for a
//! bounded time and reports latency percentiles, throughput, the service's peak resident
//! memory and the error count.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench;
use crate::cmd::Cmd;

/// Concurrent predict clients and uploaders.
const PREDICTORS: usize = 64;
const UPLOADERS: usize = 8;
/// Photos per upload request.
const PER_UPLOAD: usize = 4;
/// Load time unless `--seconds N` says otherwise.
const DEFAULT_SECONDS: u64 = 10;

/// `cargo xtask bench serve [--seconds N] [--sprout PATH]`.
pub fn run(root: &Path, options: &[&str]) -> Result<()> {
    let (seconds, sprout) = parse(options)?;
    let sprout = match sprout {
        Some(path) => path,
        None => bench::release_sprout(root)?,
    };
    let work = root.join("target/bench-serve");
    let photos = work.join("photos");
    if !photos.join("val").exists() {
        Cmd::new(&sprout.display().to_string(), root)
            .args([
                "data",
                "leaves",
                "--domain",
                "target",
                "--per-class",
                "100",
                "--size",
                "64",
                "-o",
            ])
            .args([photos.display().to_string()])
            .run()?;
    }
    let data = work.join("data");
    if data.exists() {
        fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
    }
    let token = Cmd::new(&sprout.display().to_string(), root)
        .args(["serve", "token", "create", "--scope", "train", "--data-dir"])
        .args([data.display().to_string()])
        .read()?
        .trim()
        .to_string();
    let service = Service::start(&sprout, &data, &work.join("serve.log"))?;
    let client = Client { base: service.base.clone(), token };
    let pictures = prepare(&client, &photos)?;
    let (predict, upload) = load(&client, &pictures, Duration::from_secs(seconds))?;
    let rss = peak_rss_mib(service.child.id());
    println!("{}", predict.line(&format!("serve predict concurrency {PREDICTORS}"), "req/s", rss));
    println!(
        "{}",
        upload.line(
            &format!("serve upload concurrency {UPLOADERS} ({PER_UPLOAD} images each)"),
            "req/s",
            rss
        )
    );
    if predict.errors + upload.errors > 0 {
        bail!(
            "{} requests failed (see {})",
            predict.errors + upload.errors,
            work.join("serve.log").display()
        );
    }
    Ok(())
}

fn parse(options: &[&str]) -> Result<(u64, Option<PathBuf>)> {
    let usage = "usage: cargo xtask bench serve [--seconds N] [--sprout PATH]";
    let (mut seconds, mut sprout) = (DEFAULT_SECONDS, None);
    let mut rest = options;
    while let [flag, value, tail @ ..] = rest {
        match *flag {
            "--seconds" => {
                seconds = value
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .with_context(|| format!("--seconds `{value}`: {usage}"))?
            }
            "--sprout" => sprout = Some(PathBuf::from(value)),
            _ => bail!("unknown option `{flag}`: {usage}"),
        }
        rest = tail;
    }
    if !rest.is_empty() {
        bail!("{usage}");
    }
    Ok((seconds, sprout))
}

/// The service as a child process, killed on drop.
pub struct Service {
    child: Child,
    pub base: String,
}

impl Service {
    pub fn start(sprout: &Path, data: &Path, log: &Path) -> Result<Self> {
        Self::start_at(sprout, data, log, "127.0.0.1:0")
    }

    /// [`Service::start`] listening on `listen` (e.g. the address it had before a restart).
    pub fn start_at(sprout: &Path, data: &Path, log: &Path, listen: &str) -> Result<Self> {
        let log = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(sprout)
            .args(["serve", "--listen", listen, "--data-dir"])
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", sprout.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("sprout serve printed `{line}`"))?
            .to_string();
        Ok(Self { child, base })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests with the bearer token; each thread makes its own (one kept-alive connection).
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub token: String,
}

impl Client {
    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder().http_status_as_error(false).build().into()
    }

    /// `method path` with an optional `(content type, body)`: the status and the body.
    fn call(
        &self,
        agent: &ureq::Agent,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(u16, String)> {
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token));
        let response = match body {
            Some((kind, bytes)) => agent.run(request.header("Content-Type", kind).body(bytes)?),
            None => agent.run(request.body(())?),
        };
        let mut response = response.with_context(|| format!("{method} {path}"))?;
        let status = response.status().as_u16();
        Ok((status, response.body_mut().read_to_string().unwrap_or_default()))
    }

    /// [`Client::call`] that must answer `expected`.
    pub fn expect(
        &self,
        agent: &ureq::Agent,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        expected: u16,
    ) -> Result<String> {
        let (status, text) = self.call(agent, method, path, body)?;
        if status != expected {
            bail!("{method} {path}: {status} {text}");
        }
        Ok(text)
    }
}

/// A multipart body of `(class, file name, bytes)` parts and its content type.
pub fn multipart(parts: &[(String, String, Vec<u8>)]) -> (String, Vec<u8>) {
    let boundary = "sprout-bench-4c1d";
    let mut body = Vec::new();
    for (class, name, bytes) in parts {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{class}\"; filename=\"{name}\"\r\n\r\n").as_bytes());
        body.extend(bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A labelled photo to upload: class, file name, encoded bytes.
pub type Photo = (String, String, Vec<u8>);

/// The photos under `dir/<split>/<class>/` of `splits` as `(class, name, bytes)`.
pub fn read_photos(dir: &Path, splits: &[&str]) -> Result<Vec<Photo>> {
    let mut photos = Vec::new();
    for split in splits {
        let mut classes: Vec<_> = fs::read_dir(dir.join(split))?.collect::<Result<_, _>>()?;
        classes.sort_by_key(|e| e.file_name());
        for class in classes {
            let mut files: Vec<_> = fs::read_dir(class.path())?.collect::<Result<_, _>>()?;
            files.sort_by_key(|e| e.file_name());
            for file in files {
                let name = format!("{split}-{}", file.file_name().to_string_lossy());
                photos.push((
                    class.file_name().to_string_lossy().into_owned(),
                    name,
                    fs::read(file.path())?,
                ));
            }
        }
    }
    Ok(photos)
}

/// Uploads the photos, trains a leafnet head on them through a job and creates the
/// uploaders' data sets; returns the photos.
fn prepare(client: &Client, dir: &Path) -> Result<Vec<Photo>> {
    let photos = read_photos(dir, &["train", "val"])?;
    let mut classes: Vec<&str> = photos.iter().map(|p| p.0.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    let agent = Client::agent();
    let classes =
        format!("[{}]", classes.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(","));
    for name in
        std::iter::once("bench".to_string()).chain((0..UPLOADERS).map(|i| format!("upload-{i}")))
    {
        let body = format!("{{\"name\": \"{name}\", \"classes\": {classes}}}");
        client.expect(
            &agent,
            "POST",
            "/api/v1/datasets",
            Some(("application/json", body.into_bytes())),
            201,
        )?;
    }
    let (kind, body) = multipart(&photos);
    client.expect(&agent, "POST", "/api/v1/datasets/bench/images", Some((&kind, body)), 200)?;
    let job =
        r#"{"dataset": "bench", "base": {"zoo": "leafnet"}, "trainable": "head", "epochs": 1}"#;
    let created: serde_json::Value = serde_json::from_str(&client.expect(
        &agent,
        "POST",
        "/api/v1/jobs",
        Some(("application/json", job.into())),
        201,
    )?)?;
    let start = Instant::now();
    finished_job(client, &agent, &created, Duration::from_secs(600))?;
    eprintln!("trained a leafnet head through the API in {:.1} s", start.elapsed().as_secs_f64());
    Ok(photos)
}

/// Waits (at most `timeout`) for the job `created` (as `POST` answered it) to succeed;
/// returns it as it ended.
pub fn finished_job(
    client: &Client,
    agent: &ureq::Agent,
    created: &serde_json::Value,
    timeout: Duration,
) -> Result<serde_json::Value> {
    let path = format!("/api/v1/jobs/{}", created["id"]);
    let start = Instant::now();
    loop {
        let job: serde_json::Value =
            serde_json::from_str(&client.expect(agent, "GET", &path, None, 200)?)?;
        match job["status"].as_str() {
            Some("succeeded") => return Ok(job),
            Some("failed" | "cancelled") => bail!("job {} did not succeed: {job}", created["id"]),
            _ if start.elapsed() > timeout => bail!("job {} is still {job}", created["id"]),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// What one kind of client measured.
struct Measured {
    latencies: Vec<Duration>,
    errors: usize,
    seconds: f64,
}

impl Measured {
    fn line(&self, label: &str, unit: &str, rss_mib: f64) -> String {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let at = |q: f64| {
            sorted
                .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        format!(
            "{label}: p50 {:.1} ms, p99 {:.1} ms, {:.0} {unit}, peak RSS {rss_mib:.0} MiB, errors {}",
            at(0.50),
            at(0.99),
            sorted.len() as f64 / self.seconds,
            self.errors
        )
    }
}

/// Runs the predict clients and uploaders together for `duration`.
fn load(
    client: &Client,
    photos: &[(String, String, Vec<u8>)],
    duration: Duration,
) -> Result<(Measured, Measured)> {
    let photos = Arc::new(photos.to_vec());
    let barrier = Arc::new(Barrier::new(PREDICTORS + UPLOADERS));
    let worker = |index: usize, upload: bool| {
        let (client, photos, barrier) = (client.clone(), Arc::clone(&photos), Arc::clone(&barrier));
        std::thread::spawn(move || {
            let agent = Client::agent();
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            barrier.wait();
            let deadline = Instant::now() + duration;
            let mut round = 0;
            while Instant::now() < deadline {
                let start = Instant::now();
                let result = if upload {
                    let first = (index * 97 + round * PER_UPLOAD) % photos.len();
                    let parts: Vec<_> = (0..PER_UPLOAD)
                        .map(|k| photos[(first + k) % photos.len()].clone())
                        .collect();
                    let (kind, body) = multipart(&parts);
                    client.call(
                        &agent,
                        "POST",
                        &format!("/api/v1/datasets/upload-{index}/images"),
                        Some((&kind, body)),
                    )
                } else {
                    let photo = &photos[(index * 31 + round) % photos.len()].2;
                    client.call(
                        &agent,
                        "POST",
                        "/api/v1/models/bench/predict",
                        Some(("image/png", photo.clone())),
                    )
                };
                match result {
                    Ok((200, _)) => latencies.push(start.elapsed()),
                    Ok((status, text)) => {
                        errors += 1;
                        eprintln!("{status}: {text}");
                    }
                    Err(error) => {
                        errors += 1;
                        eprintln!("{error:#}");
                    }
                }
                round += 1;
            }
            (latencies, errors)
        })
    };
    let predictors: Vec<_> = (0..PREDICTORS).map(|i| worker(i, false)).collect();
    let uploaders: Vec<_> = (0..UPLOADERS).map(|i| worker(i, true)).collect();
    let gather =
        |threads: Vec<std::thread::JoinHandle<(Vec<Duration>, usize)>>| -> Result<Measured> {
            let mut measured =
                Measured { latencies: Vec::new(), errors: 0, seconds: duration.as_secs_f64() };
            for thread in threads {
                let (latencies, errors) =
                    thread.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
                measured.latencies.extend(latencies);
                measured.errors += errors;
            }
            Ok(measured)
        };
    Ok((gather(predictors)?, gather(uploaders)?))
}

/// The peak resident memory of process `pid` in MiB (`VmHWM`; 0 where unknown).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

#[cfg(test)]
mod tests {
    use super::{multipart, parse, Measured};
    use std::time::Duration;

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        assert_eq!(parse(&[]).unwrap(), (10, None));
        let (seconds, sprout) = parse(&["--seconds", "3", "--sprout", "/x/sprout"]).unwrap();
        assert_eq!((seconds, sprout.unwrap().to_str().unwrap()), (3, "/x/sprout"));
        assert!(parse(&["--seconds", "0"]).is_err());
        assert!(parse(&["--photos", "3"]).is_err());
        assert!(parse(&["--seconds"]).is_err());
    }

    #[test]
    fn the_report_line_has_percentiles_throughput_and_errors() {
        let latencies = (1..=100).map(Duration::from_millis).collect();
        let line = Measured { latencies, errors: 2, seconds: 2.0 }.line("x", "req/s", 12.4);
        assert_eq!(line, "x: p50 51.0 ms, p99 100.0 ms, 50 req/s, peak RSS 12 MiB, errors 2");
    }

    #[test]
    fn multipart_bodies_name_class_and_file() {
        let (kind, body) = multipart(&[("rust".into(), "a.png".into(), b"PNG".to_vec())]);
        let body = String::from_utf8(body).unwrap();
        assert!(kind.ends_with("boundary=sprout-bench-4c1d"));
        assert!(
            body.contains("name=\"rust\"; filename=\"a.png\"\r\n\r\nPNG\r\n--sprout-bench-4c1d--")
        );
    }
}

//! `sprout serve` driven over HTTP as a client would: tokens and scopes, bad requests,
//! uploads, a fine-tuning job that registers a version and predicts, promotion and
//! rollback, deletion of versions nothing needs, cancel (no time left shown after it), and
//! a data set that cannot be deleted under a job; boards (fake devices behind the real link)
//! trained, pulled into the registry and pushed to; HTTPS.

mod common;
#[path = "../../device/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use common::{fails, ok, s, serve_token as token, start_serve, tiny_model, Scratch};
use serde_json::{json, Value};
use sprout_core::format::device_checkpoint::{self as checkpoint, CheckpointInfo};
use sprout_core::link::{DeviceApp, Split, TrainingState};
use support::fake_app::{spawn_tcp_device, FakeApp, CLASSES, MODEL_HASH};

/// A running service on a free loopback port, killed on drop.
struct Server {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(data: &Path, extra: &[&str]) -> Self {
        let (child, base) = start_serve(data, extra);
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Self { child, base, agent }
    }

    /// `METHOD PATH` with `token` and an optional `(content type, body)`: status and body.
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
    ) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let request = ureq::http::Request::builder().method(method).uri(&url);
        let request = match token {
            Some(token) => request.header("Authorization", format!("Bearer {token}")),
            None => request,
        };
        let response = match body {
            Some((kind, bytes)) => {
                self.agent.run(request.header("Content-Type", kind).body(bytes).unwrap())
            }
            // No body and no length: ureq sends a POST's empty body chunked, its end marker
            // after the head, as many clients do.
            None => self.agent.run(request.body(()).unwrap()),
        };
        let mut response = response.unwrap();
        let status = response.status().as_u16();
        let bytes = response.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap();
        (status, bytes)
    }

    /// [`Server::call`] with a JSON answer.
    fn json(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        let (status, bytes) = self.call(method, path, token, body);
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                panic!("{method} {path}: not JSON: {}", String::from_utf8_lossy(&bytes))
            }),
        )
    }

    /// The job's events from its SSE stream, until it ends.
    fn events(&self, job: i64, token: &str) -> Vec<Value> {
        let url = format!("{}/api/v1/jobs/{job}/events", self.base);
        let response =
            self.agent.get(&url).header("Authorization", format!("Bearer {token}")).call().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let reader = BufReader::new(response.into_body().into_reader());
        reader
            .lines()
            .map(Result::unwrap)
            .filter_map(|line| {
                line.strip_prefix("data: ").map(|d| serde_json::from_str(d).unwrap())
            })
            .collect()
    }

    /// Waits until job `id`'s event stream tells an epoch.
    fn wait_for_epoch(&self, id: i64, token: &str) {
        let url = format!("{}/api/v1/jobs/{id}/events", self.base);
        let stream =
            self.agent.get(&url).header("Authorization", format!("Bearer {token}")).call().unwrap();
        let first_epoch = BufReader::new(stream.into_body().into_reader())
            .lines()
            .map(Result::unwrap)
            .find(|line| line.contains(r#""kind":"epoch""#));
        assert!(first_epoch.is_some(), "job {id} reported no epoch");
    }

    /// Waits (at most a minute) until job `id` has a status in `wanted`.
    fn wait_for(&self, id: i64, token: &str, wanted: &[&str]) -> Value {
        let start = Instant::now();
        loop {
            let (_, job) = self.json("GET", &format!("/api/v1/jobs/{id}"), Some(token), None);
            if wanted.contains(&job["status"].as_str().unwrap()) {
                return job;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "job {id} stays {job}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A multipart body of `(field, file name, bytes)` parts, with its content type.
fn multipart(parts: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "sprout-test-boundary-7f3a";
    let mut body = Vec::new();
    for (field, file, bytes) in parts {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{file}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
        body.extend(*bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Synthetic leaf photos (32x32) of the tiny model's three classes: (class, file, bytes).
fn photos(scratch: &Scratch, per_class: u32) -> Vec<(String, String, Vec<u8>)> {
    let dir = scratch.path("leaves");
    ok(&["data", "leaves", "-o", s(&dir), "--per-class", &per_class.to_string(), "--size", "32"]);
    let mut photos = Vec::new();
    for split in ["train", "val"] {
        for class in ["healthy", "leaf_spot", "rust"] {
            let folder = dir.join(split).join(class);
            let mut files: Vec<_> =
                std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()).collect();
            files.sort();
            for file in files {
                let name = format!("{split}-{}", file.file_name().unwrap().to_string_lossy());
                photos.push((class.to_string(), name, std::fs::read(&file).unwrap()));
            }
        }
    }
    photos
}

/// Creates data set `name` of the three classes and uploads `photos` to it.
fn upload_dataset(
    server: &Server,
    token: &str,
    name: &str,
    photos: &[(String, String, Vec<u8>)],
) -> Value {
    let (status, _) = server.json(
        "POST",
        "/api/v1/datasets",
        Some(token),
        Some(json!({"name": name, "classes": ["healthy", "leaf_spot", "rust"]})),
    );
    assert_eq!(status, 201);
    let parts: Vec<(&str, &str, &[u8])> =
        photos.iter().map(|(c, n, b)| (c.as_str(), n.as_str(), b.as_slice())).collect();
    let (kind, body) = multipart(&parts);
    let (status, bytes) = server.call(
        "POST",
        &format!("/api/v1/datasets/{name}/images"),
        Some(token),
        Some((&kind, body)),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

/// Uploads the tiny 16x16 classifier as model `base`, version 1.
fn upload_base(server: &Server, token: &str, scratch: &Scratch) {
    let path = scratch.path("tiny.sprout");
    tiny_model(&path);
    let body = Some(("application/octet-stream", std::fs::read(&path).unwrap()));
    let (status, bytes) = server.call("POST", "/api/v1/models/base/versions", Some(token), body);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&bytes));
}

/// `status`, once `body`'s error message is checked to contain `needle`.
fn error(status: u16, body: &Value, needle: &str) -> u16 {
    let message = body["error"].as_str().unwrap_or_else(|| panic!("no error field: {body}"));
    assert!(message.contains(needle), "'{needle}' not in '{message}'");
    status
}

#[test]
fn tokens_scopes_and_bad_requests_get_json_errors() {
    let scratch = Scratch::new("serve-errors");
    let data = scratch.path("data");
    let (reader, trainer) = (token(&data, "read"), token(&data, "train"));
    let server = Server::start(&data, &["--max-body", "64KiB", "--memory-limit", "1MiB"]);

    let (status, health) = server.json("GET", "/healthz", None, None);
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (status, doc) = server.json("GET", "/api/v1/openapi.json", None, None);
    assert_eq!(status, 200);
    assert!(doc["paths"]["/api/v1/jobs/{id}/events"]["get"].is_object(), "{doc}");

    let (status, body) = server.json("GET", "/api/v1/datasets", None, None);
    assert_eq!(error(status, &body, "missing token"), 401);
    let (status, body) = server.json("GET", "/api/v1/datasets", Some("sprout_0000"), None);
    assert_eq!(error(status, &body, "unknown token"), 401);
    let new = json!({"name": "leaves", "classes": ["healthy", "rust"]});
    let (status, body) = server.json("POST", "/api/v1/datasets", Some(&reader), Some(new.clone()));
    assert_eq!(error(status, &body, "scope 'train'"), 403);
    let (status, body) =
        server.json("POST", "/api/v1/tokens", Some(&trainer), Some(json!({"scope": "admin"})));
    assert_eq!(error(status, &body, "scope 'admin'"), 403);

    let (status, bytes) = server.call(
        "POST",
        "/api/v1/datasets",
        Some(&trainer),
        Some(("application/json", b"{\"name\": ".to_vec())),
    );
    assert_eq!(error(status, &serde_json::from_slice(&bytes).unwrap(), "EOF"), 400);
    let unknown = json!({"name": "leaves", "classes": ["a"], "colour": "green"});
    let (status, body) = server.json("POST", "/api/v1/datasets", Some(&trainer), Some(unknown));
    assert_eq!(error(status, &body, "unknown field `colour`"), 422);
    for (name, classes) in
        [("../etc", json!(["a"])), ("leaves", json!(["a/../../b"])), (".hidden", json!(["a"]))]
    {
        let (status, body) = server.json(
            "POST",
            "/api/v1/datasets",
            Some(&trainer),
            Some(json!({"name": name, "classes": classes})),
        );
        assert_eq!(error(status, &body, "not a valid name"), 422);
    }
    let (status, body) = server.json("GET", "/api/v1/nothing", Some(&trainer), None);
    assert_eq!(error(status, &body, "no such route"), 404);
    // Encoded climbs in a URL are names like any other: found nowhere.
    for path in [
        "/api/v1/datasets/..%2F..%2Fsprout.db",
        "/api/v1/models/..%2Fsprout.db/versions/1/file",
        "/api/v1/models/%2E%2E/versions/1/file?format=onnx",
    ] {
        let (status, body) = server.json("GET", path, Some(&trainer), None);
        assert_eq!(error(status, &body, "not found"), 404, "{path}");
    }

    // An admin makes and revokes tokens; a revoked one is refused, listed ones show no secret.
    let admin = token(&data, "admin");
    let (status, made) = server.json(
        "POST",
        "/api/v1/tokens",
        Some(&admin),
        Some(json!({"scope": "read", "label": "camera"})),
    );
    assert_eq!(status, 201);
    let made = made["token"].as_str().unwrap().to_string();
    assert_eq!(server.json("GET", "/api/v1/datasets", Some(&made), None).0, 200);
    let (_, listed) = server.json("GET", "/api/v1/tokens", Some(&admin), None);
    let camera = listed.as_array().unwrap().iter().find(|t| t["label"] == "camera").unwrap();
    assert!(!listed.to_string().contains(&made[7..]), "{listed}");
    let (status, _) =
        server.call("DELETE", &format!("/api/v1/tokens/{}", camera["id"]), Some(&admin), None);
    assert_eq!(status, 204);
    let (status, body) = server.json("GET", "/api/v1/datasets", Some(&made), None);
    assert_eq!(error(status, &body, "unknown token"), 401);

    let (status, _) = server.json("POST", "/api/v1/datasets", Some(&trainer), Some(new.clone()));
    assert_eq!(status, 201);
    let (status, body) = server.json("POST", "/api/v1/datasets", Some(&trainer), Some(new));
    assert_eq!(error(status, &body, "exists already"), 409);

    // Per-file reports: a corrupt picture, an unknown class, a duplicate; nothing stored
    // for the bad ones.
    let photos = photos(&scratch, 1);
    let png = &photos[0].2;
    let corrupt = &png[..png.len() / 2];
    let (kind, body) = multipart(&[
        ("healthy", "a.png", png),
        ("healthy", "b.png", corrupt),
        ("mildew", "c.png", png),
        ("rust", "d.png", png),
    ]);
    let (status, bytes) =
        server.call("POST", "/api/v1/datasets/leaves/images", Some(&trainer), Some((&kind, body)));
    assert_eq!(status, 200);
    let report: Value = serde_json::from_slice(&bytes).unwrap();
    let statuses: Vec<&str> =
        report["files"].as_array().unwrap().iter().map(|f| f["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["added", "rejected", "rejected", "duplicate"], "{report}");
    assert!(report["files"][1]["detail"].as_str().unwrap().contains("b.png"), "{report}");
    assert!(report["files"][2]["detail"].as_str().unwrap().contains("unknown class 'mildew'"));
    assert!(report["files"][3]["detail"].as_str().unwrap().contains("class 'healthy'"));
    let (_, detail) = server.json("GET", "/api/v1/datasets/leaves", Some(&reader), None);
    assert_eq!(detail["dataset"]["images"], 1);
    assert_eq!(walk(&data.join("images")).len(), 1);
    assert!(
        std::fs::read_dir(data.join("tmp")).unwrap().next().is_none(),
        "staged files are removed"
    );

    // A body over --max-body: 413 with a JSON error, nothing stored.
    let big = vec![0u8; 100 << 10];
    let (kind, body) = multipart(&[("healthy", "big.png", &big)]);
    let (status, bytes) =
        server.call("POST", "/api/v1/datasets/leaves/images", Some(&trainer), Some((&kind, body)));
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&bytes));
    assert!(serde_json::from_slice::<Value>(&bytes).unwrap()["error"].is_string());
    assert_eq!(walk(&data.join("images")).len(), 1);

    // Jobs are checked before they queue: every class needs images, and the plan's memory
    // must fit (--memory-limit 1MiB here).
    let job = json!({"dataset": "leaves", "base": {"zoo": "resnet"}, "epochs": 1});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(job.clone()));
    assert_eq!(error(status, &body, "class 'rust' of data set 'leaves' has no images"), 422);
    let rust = &photos.iter().find(|p| p.0 == "rust").unwrap().2;
    let (kind, body) = multipart(&[("rust", "e.png", rust)]);
    server.call("POST", "/api/v1/datasets/leaves/images", Some(&trainer), Some((&kind, body)));
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(job));
    assert_eq!(error(status, &body, "MiB are left of --memory-limit"), 422);
    let mlp = json!({"dataset": "leaves", "base": {"zoo": "mlp"}});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(mlp));
    assert_eq!(error(status, &body, "not square RGB pictures"), 422);
    let prox = json!({"dataset": "leaves", "base": {"zoo": "mlp"}, "proximal_mu": -0.5});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(prox));
    assert_eq!(error(status, &body, "proximal_mu must be a number of 0 or more"), 422);
    let skew = json!({"dataset": "leaves", "base": {"zoo": "mlp"}, "logit_adjust": -1.0});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(skew));
    assert_eq!(error(status, &body, "logit_adjust must be a number of 0 or more"), 422);
    let linear = json!({"dataset": "leaves", "base": {"zoo": "mlp"}, "schedule": "linear"});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(linear));
    assert_eq!(error(status, &body, "unknown variant `linear`"), 422);
    let frozen = json!({"dataset": "leaves", "base": {"zoo": "mlp"}, "batch_norm": "frozen"});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(frozen));
    assert_eq!(error(status, &body, "unknown variant `frozen`"), 422);
    let (_, jobs) = server.json("GET", "/api/v1/jobs", Some(&reader), None);
    assert_eq!(jobs, json!([]));

    let (status, _) = server.call("DELETE", "/api/v1/datasets/leaves", Some(&trainer), None);
    assert_eq!(status, 204);
    assert!(walk(&data.join("images")).is_empty(), "the data set's images are deleted");
    let (status, body) = server.json("GET", "/api/v1/datasets/leaves", Some(&reader), None);
    assert_eq!(error(status, &body, "data set 'leaves' not found"), 404);
}

/// One HTTP/1.1 request on a kept-alive connection `stream`: the head, then (after a pause
/// that lets the service answer first) each of `body`'s pieces. Answers the status, whether
/// the response says `Connection: close`, and the body.
fn raw_request(stream: &mut TcpStream, head: &str, body: &[&[u8]]) -> (u16, bool, Vec<u8>) {
    use std::io::{Read, Write};
    stream.write_all(head.as_bytes()).unwrap();
    stream.flush().unwrap();
    for piece in body {
        std::thread::sleep(Duration::from_millis(15));
        // The service may have answered and closed already: what it said is read below.
        if stream.write_all(piece).is_err() {
            break;
        }
    }
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut buffer).unwrap_or(0);
        assert!(n > 0, "the service closed the connection before answering {head:?}");
        received.extend_from_slice(&buffer[..n]);
    };
    let head_text = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
    let status = head_text[9..12].parse().unwrap();
    let length: usize = head_text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .expect("answers have a length")
        .trim()
        .parse()
        .unwrap();
    let closes = head_text.lines().any(|l| l.starts_with("connection:") && l.contains("close"));
    while received.len() < end + length {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "the connection closed inside the answer");
        received.extend_from_slice(&buffer[..n]);
    }
    (status, closes, received[end..end + length].to_vec())
}

#[test]
fn kept_alive_connections_survive_bodies_left_unread() {
    let scratch = Scratch::new("serve-keepalive");
    let data = scratch.path("data");
    let (reader, trainer) = (token(&data, "read"), token(&data, "train"));
    let server = Server::start(&data, &["--max-body", "64KiB"]);
    let address = server.base.strip_prefix("http://").unwrap().to_string();
    let mut stream = TcpStream::connect(&address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = |method: &str, path: &str, token: &str, framing: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n{framing}\r\n"
        )
    };
    let json = br#"{"name": "leaves", "classes": ["a"]}"#;
    let json_length = format!("Content-Length: {}\r\n", json.len());
    let (kind, upload) = multipart(&[("a", "a.png", &[7u8; 2000][..])]);
    let upload_framing = format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", upload.len());
    let big = vec![0u8; 100 << 10];
    let big_length = format!("Content-Length: {}\r\n", big.len());
    let (first, rest) = upload.split_at(upload.len() / 2);
    let json_chunked = "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n";
    let unknown = br#"{"name": "x", "classes": ["a"], "colour": 1}"#;
    let unknown_field = [format!("{:x}\r\n", unknown.len()).as_bytes(), unknown, b"\r\n"].concat();
    // Requests the handler answers before (or without) reading their bodies, each with the
    // body late, in the framings clients use.
    let cases: Vec<(String, Vec<&[u8]>, u16)> = vec![
        // Bodiless POSTs: chunked with only the end marker (ureq), no framing at all.
        (
            head("POST", "/api/v1/jobs/424242/cancel", &trainer, "Transfer-Encoding: chunked\r\n"),
            vec![&b"0\r\n\r\n"[..]],
            404,
        ),
        (head("POST", "/api/v1/models/none/rollback", &trainer, ""), vec![], 404),
        (head("POST", "/api/v1/datasets", "sprout_0000", &json_length), vec![&json[..]], 401),
        (head("POST", "/api/v1/datasets", &reader, &json_length), vec![&json[..]], 403),
        (
            head("POST", "/api/v1/datasets/absent/images", &trainer, &upload_framing),
            vec![first, rest],
            404,
        ),
        (
            head("POST", "/api/v1/models/m/versions", &trainer, &big_length),
            vec![&big[..50 << 10], &big[50 << 10..]],
            413,
        ),
        (
            head("POST", "/api/v1/datasets", &trainer, json_chunked),
            vec![&unknown_field[..], &b"0\r\n\r\n"[..]],
            422,
        ),
    ];
    for round in 0..8 {
        for (head, body, expected) in &cases {
            let (status, closes, answer) = raw_request(&mut stream, head, body);
            let error: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(status, *expected, "round {round}, {head:?}: {error}");
            assert!(error["error"].is_string(), "{error}");
            assert!(!closes, "round {round}, {head:?}: the connection is closed");
        }
    }
    // An ordinary client on its pooled connections: bodiless POSTs in a row.
    for _ in 0..50 {
        let (status, _) = server.json("POST", "/api/v1/jobs/424242/cancel", Some(&trainer), None);
        assert_eq!(status, 404);
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_job_trains_registers_a_version_that_predicts_and_can_be_rolled_back() {
    let scratch = Scratch::new("serve-job");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let server = Server::start(&data, &[]);
    let photos = photos(&scratch, 4);
    let report = upload_dataset(&server, &trainer, "leaves", &photos);
    assert_eq!(report["added"], photos.len());
    upload_base(&server, &trainer, &scratch);

    let request = json!({"dataset": "leaves", "base": {"model": {"name": "base"}}, "epochs": 2, "batch_size": 4, "lr": 0.05});
    let (status, job) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(request.clone()));
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_i64().unwrap();
    assert_eq!(job["request"]["base"]["model"]["version"], 1, "the base version is fixed");
    assert!(job["estimate_bytes"].as_u64().unwrap() > 64 << 20);
    let events = server.events(id, &trainer);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let last = events.last().unwrap();
    assert_eq!(last["data"]["status"], "succeeded", "{events:#?}");
    assert!(kinds.contains(&"start") && kinds.contains(&"progress"), "{kinds:?}");
    let epochs: Vec<&Value> = events.iter().filter(|e| e["kind"] == "epoch").collect();
    assert_eq!(epochs.len(), 2);
    for key in ["train_loss", "val_loss", "val_accuracy", "learning_rate", "images_per_second"] {
        assert!(epochs[1]["data"][key].is_number(), "{key} in {}", epochs[1]);
    }
    let rate = |epoch: &Value| epoch["data"]["learning_rate"].as_f64().unwrap();
    // The f32 rate may come out in its shortest decimal (0.05) or widened (0.0500000007).
    assert!((rate(epochs[1]) - 0.05).abs() < 1e-6, "a constant rate by default: {}", epochs[1]);
    // A late client sees the same history.
    assert_eq!(server.events(id, &trainer), events);
    let job = server.wait_for(id, &trainer, &["succeeded"]);
    assert_eq!(job["version"], 1);

    let (_, model) = server.json("GET", "/api/v1/models/leaves", Some(&trainer), None);
    assert_eq!(model["current_version"], 1);
    assert_eq!(model["versions"][0]["job"], id);
    assert!(model["versions"][0]["metrics"]["best_accuracy"].is_number(), "{model}");
    let (status, file) =
        server.call("GET", "/api/v1/models/leaves/versions/1/file", Some(&trainer), None);
    assert_eq!(status, 200);
    assert_eq!(
        file,
        std::fs::read(data.join("jobs").join(id.to_string()).join("model.sprout")).unwrap()
    );
    let (status, onnx) = server.call(
        "GET",
        "/api/v1/models/leaves/versions/1/file?format=onnx",
        Some(&trainer),
        None,
    );
    assert_eq!(status, 200);
    assert!(onnx.len() > 1000 && onnx.windows(4).any(|w| w == b"Gemm"), "an ONNX graph");
    let (status, bundle) = server.call(
        "GET",
        "/api/v1/models/leaves/versions/1/file?format=bundle",
        Some(&trainer),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bundle));
    assert!(bundle.starts_with(b"\x89SPRBDL\n"), "a device bundle");
    let (status, _) = server.call(
        "GET",
        "/api/v1/models/leaves/versions/1/file?format=tflite",
        Some(&trainer),
        None,
    );
    assert_eq!(status, 400);

    let (status, answer) = server.call(
        "POST",
        "/api/v1/models/leaves/predict?top_k=2",
        Some(&trainer),
        Some(("image/png", photos[0].2.clone())),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["version"], 1);
    let top = answer["top"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert!(top[0]["probability"].as_f64() >= top[1]["probability"].as_f64());
    let (status, bytes) = server.call(
        "POST",
        "/api/v1/models/leaves/predict",
        Some(&trainer),
        Some(("image/png", b"not a picture".to_vec())),
    );
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&bytes));

    // A second job (with a cosine schedule) makes version 2, not current until promoted;
    // rollback returns to 1.
    let mut request = request;
    request["schedule"] = json!("cosine");
    let (_, second) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(request));
    let second = second["id"].as_i64().unwrap();
    server.wait_for(second, &trainer, &["succeeded"]);
    let events = server.events(second, &trainer);
    let epochs: Vec<&Value> = events.iter().filter(|e| e["kind"] == "epoch").collect();
    assert!(rate(epochs[1]) < 0.5 * rate(epochs[0]), "the cosine decays: {epochs:?}");
    let (_, model) = server.json("GET", "/api/v1/models/leaves", Some(&trainer), None);
    assert_eq!(
        (model["current_version"].as_u64(), model["versions"].as_array().unwrap().len()),
        (Some(1), 2)
    );
    let (status, model) = server.json(
        "POST",
        "/api/v1/models/leaves/promote",
        Some(&trainer),
        Some(json!({"version": 2})),
    );
    assert_eq!(
        (status, model["current_version"].as_u64(), model["previous_version"].as_u64()),
        (200, Some(2), Some(1))
    );
    let (_, model) = server.json("POST", "/api/v1/models/leaves/rollback", Some(&trainer), None);
    assert_eq!(model["current_version"], 1);
    let (status, _) = server.json(
        "POST",
        "/api/v1/models/leaves/promote",
        Some(&trainer),
        Some(json!({"version": 9})),
    );
    assert_eq!(status, 404);
}

#[test]
fn cancel_kills_the_training_process_and_a_busy_data_set_stays() {
    let scratch = Scratch::new("serve-cancel");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let server = Server::start(&data, &[]);
    upload_dataset(&server, &trainer, "leaves", &photos(&scratch, 4));
    upload_base(&server, &trainer, &scratch);
    let long = json!({"dataset": "leaves", "base": {"model": {"name": "base"}}, "epochs": 5000, "batch_size": 4});
    let (_, job) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(long.clone()));
    let id = job["id"].as_i64().unwrap();
    let (_, queued) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(long));
    server.wait_for(id, &trainer, &["running"]);
    // A running job shows its progress with the time left.
    let started = Instant::now();
    loop {
        let (_, job) = server.json("GET", &format!("/api/v1/jobs/{id}"), Some(&trainer), None);
        if job["progress"]["eta_seconds"].as_f64().is_some_and(|eta| eta > 0.0) {
            assert!(job["progress"]["epoch"].as_u64().unwrap() >= 1, "{job}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no time left shown: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let (status, body) = server.json("DELETE", "/api/v1/datasets/leaves", Some(&trainer), None);
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("used by job(s)"));

    // The queued one is cancelled at once, the running one when its process has died.
    let (status, _) =
        server.json("POST", &format!("/api/v1/jobs/{}/cancel", queued["id"]), Some(&trainer), None);
    assert_eq!(status, 202);
    let (status, _) =
        server.json("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&trainer), None);
    assert_eq!(status, 202);
    let started = Instant::now();
    let cancelled = server.wait_for(id, &trainer, &["cancelled"]);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Its last progress stays, without a time left.
    let progress = &cancelled["progress"];
    assert!(progress["epoch"].is_number() && progress["eta_seconds"].is_null(), "{cancelled}");
    let (_, other) =
        server.json("GET", &format!("/api/v1/jobs/{}", queued["id"]), Some(&trainer), None);
    assert_eq!(other["status"], "cancelled");
    let (status, _) =
        server.json("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&trainer), None);
    assert_eq!(status, 409);
    // No training process is left (its memory is free).
    let snapshot = data.join("jobs").join(id.to_string()).join("data");
    let trains = Command::new("pgrep").args(["-f", s(&snapshot)]).output().unwrap();
    assert!(
        trains.stdout.is_empty(),
        "a training process is left: {}",
        String::from_utf8_lossy(&trains.stdout)
    );
    let (status, _) = server.call("DELETE", "/api/v1/datasets/leaves", Some(&trainer), None);
    assert_eq!(status, 204);
}

#[test]
fn sigterm_stops_the_service_while_two_runners_train_and_stream() {
    let scratch = Scratch::new("serve-term");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let mut server = Server::start(&data, &["--runners", "2"]);
    upload_dataset(&server, &trainer, "leaves", &photos(&scratch, 2));
    upload_base(&server, &trainer, &scratch);
    let long = json!({"dataset": "leaves", "base": {"model": {"name": "base"}}, "epochs": 5000, "batch_size": 2});
    // Two runners: both jobs train at once.
    let (_, job) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(long.clone()));
    let (_, other) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(long));
    server.wait_for(job["id"].as_i64().unwrap(), &trainer, &["running"]);
    server.wait_for(other["id"].as_i64().unwrap(), &trainer, &["running"]);
    let url = format!("{}/api/v1/jobs/{}/events", server.base, job["id"]);
    let listener = std::thread::spawn(move || {
        let response =
            ureq::get(&url).header("Authorization", format!("Bearer {trainer}")).call().unwrap();
        BufReader::new(response.into_body().into_reader()).lines().count()
    });
    std::thread::sleep(Duration::from_millis(200));
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let start = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "the service ignores SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(listener.join().unwrap() > 0, "the listener saw events before the stream closed");
}

#[test]
fn a_job_killed_with_its_service_resumes_and_trains_the_same_model() {
    let scratch = Scratch::new("serve-kill");
    let photos = photos(&scratch, 4);
    let job = json!({"dataset": "leaves", "base": {"model": {"name": "base"}}, "epochs": 30, "batch_size": 4, "seed": 3});
    // The same job twice: in `data` with a kill -9 of the service, in `reference` without.
    let (data, reference) = (scratch.path("data"), scratch.path("reference"));
    let (token, reference_token) = (token(&data, "train"), token(&reference, "train"));
    let server = Server::start(&data, &[]);
    let undisturbed = Server::start(&reference, &[]);
    for (server, token) in [(&server, &token), (&undisturbed, &reference_token)] {
        upload_dataset(server, token, "leaves", &photos);
        upload_base(server, token, &scratch);
        let (status, created) = server.json("POST", "/api/v1/jobs", Some(token), Some(job.clone()));
        assert_eq!((status, created["id"].as_i64()), (201, Some(1)), "{created}");
    }
    let run = data.join("jobs").join("1").join("run");
    let start = Instant::now();
    while !run.join("checkpoint-epoch-002.ckpt").exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "no checkpoint in {}", run.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(server); // SIGKILL
    let snapshot = data.join("jobs").join("1").join("data");
    let start = Instant::now();
    while !Command::new("pgrep").args(["-f", s(&snapshot)]).output().unwrap().stdout.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the training process outlived the service"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let server = Server::start(&data, &[]);
    let events = server.events(1, &token);
    let statuses: Vec<&Value> =
        events.iter().filter(|e| e["kind"] == "status").map(|e| &e["data"]).collect();
    assert!(
        statuses.iter().any(|s| s["interrupted"] == true),
        "the job was interrupted: {statuses:?}"
    );
    assert_eq!(statuses.last().unwrap()["status"], "succeeded", "{events:#?}");
    assert!(events
        .iter()
        .any(|e| e["data"]["line"].as_str().is_some_and(|l| l.starts_with("resuming from"))));
    undisturbed.wait_for(1, &reference_token, &["succeeded"]);
    let resumed = server.call("GET", "/api/v1/models/leaves/versions/1/file", Some(&token), None);
    let straight = undisturbed.call(
        "GET",
        "/api/v1/models/leaves/versions/1/file",
        Some(&reference_token),
        None,
    );
    assert_eq!(resumed.0, 200);
    assert!(resumed.1 == straight.1, "the resumed job's model differs from the undisturbed one's");
}

#[test]
fn a_zip_archive_of_class_folders_uploads_and_refuses_escaping_names() {
    use std::io::Write;
    let scratch = Scratch::new("serve-zip");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let server = Server::start(&data, &[]);
    let (status, _) = server.json(
        "POST",
        "/api/v1/datasets",
        Some(&trainer),
        Some(json!({"name": "leaves", "classes": ["healthy", "rust"]})),
    );
    assert_eq!(status, 201);
    let photos = photos(&scratch, 1);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let entries: [(&str, &[u8]); 5] = [
        ("field/healthy/a.png", &photos[0].2),
        ("rust/b.png", &photos[2].2),
        ("../rust/c.png", &photos[1].2),
        ("top.png", &photos[1].2),
        ("healthy/broken.png", &photos[1].2[..40]),
    ];
    for (name, bytes) in entries {
        zip.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(bytes).unwrap();
    }
    let archive = zip.finish().unwrap().into_inner();
    let (kind, body) = multipart(&[
        ("archive", "leaves.zip", &archive),
        ("healthy", "junk.zip", b"PK not really"),
    ]);
    let (status, bytes) =
        server.call("POST", "/api/v1/datasets/leaves/images", Some(&trainer), Some((&kind, body)));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let report: Value = serde_json::from_slice(&bytes).unwrap();
    let files: Vec<(&str, &str, &str)> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap(),
                f["class"].as_str().unwrap(),
                f["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("leaves.zip/field/healthy/a.png", "healthy", "added"),
            ("leaves.zip/rust/b.png", "rust", "added"),
            ("leaves.zip/../rust/c.png", "", "rejected"),
            ("leaves.zip/top.png", "", "rejected"),
            ("leaves.zip/healthy/broken.png", "healthy", "rejected"),
            ("junk.zip", "", "rejected"),
        ],
        "{report}"
    );
    assert!(report["files"][2]["detail"].as_str().unwrap().contains("leaves the archive"));
    assert!(report["files"][5]["detail"].as_str().unwrap().contains("not a readable zip"));
    let (_, detail) = server.json("GET", "/api/v1/datasets/leaves", Some(&trainer), None);
    assert_eq!(
        detail["dataset"]["classes"],
        json!([{"name": "healthy", "images": 1}, {"name": "rust", "images": 1}])
    );
}

/// A service for the board test `test`: its scratch folder, an admin's and a trainer's
/// token, model `base` (the tiny model, `tiny.sprout` in the scratch folder) and data set
/// `leaves` (5 photos per class).
fn board_service(test: &str) -> (Scratch, String, String, Server) {
    let scratch = Scratch::new(test);
    let data = scratch.path("data");
    let (admin, trainer) = (token(&data, "admin"), token(&data, "train"));
    let server = Server::start(&data, &[]);
    upload_base(&server, &trainer, &scratch);
    upload_dataset(&server, &trainer, "leaves", &photos(&scratch, 5));
    (scratch, admin, trainer, server)
}

/// A fake board (the device tests' app behind the real link, on a local TCP port) running a
/// bundle of model `model_hash`, holding `checkpoint`.
fn fake_board(model_hash: u64, checkpoint: Vec<u8>) -> (Arc<Mutex<FakeApp>>, String) {
    fake_board_with(model_hash, checkpoint, |_| {})
}

/// [`fake_board`], its app set up by `setup` first.
fn fake_board_with(
    model_hash: u64,
    checkpoint: Vec<u8>,
    setup: impl FnOnce(&mut FakeApp),
) -> (Arc<Mutex<FakeApp>>, String) {
    let mut app = FakeApp::new(checkpoint);
    app.model_hash = model_hash;
    setup(&mut app);
    let app = Arc::new(Mutex::new(app));
    let port = spawn_tcp_device(app.clone(), |_| false);
    (app, format!("tcp:127.0.0.1:{port}"))
}

/// A checkpoint of `bundle`'s model as a device writes it: epoch 3, accuracy 0.75, a state
/// of made-up float values.
fn device_checkpoint_of(bundle: &[u8]) -> Vec<u8> {
    let (header, _) = sprout_core::format::bundle::read_header(bundle).unwrap();
    let len = header.state.len as usize;
    let mut state: Vec<u8> =
        (0..len / 4).flat_map(|i| (0.01 * (i % 13) as f32 - 0.06).to_le_bytes()).collect();
    state.resize(len, 0);
    let info = CheckpointInfo {
        model_hash: header.model_hash,
        epoch: 3,
        progress: sprout_core::Progress { updates: 30, micro_batches: 30, pending: 0 },
        accuracy: 0.75,
    };
    let mut bytes = vec![0; checkpoint::CHECKPOINT_HEADER_BYTES + len];
    checkpoint::encode(&info, &state, &mut bytes).unwrap();
    bytes
}

#[test]
fn boards_train_and_pull_into_the_registry_and_take_pushed_versions() {
    let (_scratch, admin, trainer, server) = board_service("serve-boards");
    let (status, bundle) = server.call(
        "GET",
        "/api/v1/models/base/versions/1/file?format=bundle",
        Some(&trainer),
        None,
    );
    assert_eq!(status, 200);
    let model_hash = sprout_core::format::bundle::read_header(&bundle).unwrap().0.model_hash;
    let pulled = device_checkpoint_of(&bundle);
    let (bench, port) = fake_board(model_hash, pulled.clone());

    // Registering: an admin's, a port under /dev/ or tcp:, a board running the bundle's model.
    let register = |token: &str, name: &str, port: &str| {
        let body = json!({"name": name, "port": port, "model": "base"});
        server.json("POST", "/api/v1/boards", Some(token), Some(body))
    };
    assert_eq!(register(&trainer, "bench", &port).0, 403);
    let (status, body) = register(&admin, "bench", "/etc/passwd");
    assert_eq!(status, 422, "{body}");
    let (_, other_model) = fake_board(MODEL_HASH, Vec::new());
    let (status, body) = register(&admin, "other", &other_model);
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("runs model"), "{body}");
    let (status, body) = register(&admin, "gone", "tcp:127.0.0.1:9");
    assert_eq!(status, 502, "{body}");
    assert!(body["error"].as_str().unwrap().contains("tcp:127.0.0.1:9"), "{body}");
    let (status, board) = register(&admin, "bench", &port);
    assert_eq!(status, 201, "{board}");
    assert_eq!(board["classes"], json!(CLASSES));
    assert_eq!(board["model_hash"], format!("{model_hash:#018x}"));
    assert_eq!(register(&admin, "bench", &port).0, 409);

    // Training on the board: a job sending every image, every fifth of a class held out.
    let (status, job) = server.json(
        "POST",
        "/api/v1/boards/bench/train",
        Some(&trainer),
        Some(json!({"dataset": "leaves", "epochs": 3})),
    );
    assert_eq!(status, 201, "{job}");
    assert_eq!((job["board"].as_str(), job["request"].is_null()), (Some("bench"), true));
    let id = job["id"].as_i64().unwrap();
    let job = server.wait_for(id, &trainer, &["succeeded", "failed"]);
    assert_eq!(job["status"], "succeeded", "{job}");
    let epochs: Vec<Value> = server
        .events(id, &trainer)
        .into_iter()
        .filter(|e| e["kind"] == "epoch")
        .map(|e| e["data"]["epoch"].clone())
        .collect();
    assert!(!epochs.is_empty() && epochs.last() == Some(&json!(3)), "{epochs:?}");
    let (_, dataset) = server.json("GET", "/api/v1/datasets/leaves", Some(&trainer), None);
    let counts: Vec<u64> = dataset["dataset"]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["images"].as_u64().unwrap())
        .collect();
    {
        let app = bench.lock().unwrap();
        let held_out = app.samples.iter().filter(|(_, split, _)| *split == Split::Validation);
        assert_eq!(app.samples.len() as u64, counts.iter().sum::<u64>());
        assert_eq!(held_out.count() as u64, counts.iter().map(|n| n / 5).sum::<u64>());
    }

    // Pulling: version 2 of base is version 1 with the board's trained tensors.
    pull_bench_into_version_2(&server, &trainer);
    let file = |version: u32| {
        let path = format!("/api/v1/models/base/versions/{version}/file");
        server.call("GET", &path, Some(&trainer), None).1
    };
    let mut expected = sprout_train::Model::from_bytes(&file(1), Path::new("v1")).unwrap();
    sprout_bundle::apply_device_checkpoint(&mut expected, &bundle, &pulled).unwrap();
    let expected = sprout_core::ModelFile::from_graph(&expected.zoo.graph, expected.metadata);
    assert!(file(2) == sprout_core::save_model(&expected).unwrap(), "v2 is not v1 + checkpoint");

    // Pushing: version 2's checkpoint reaches a second board with the same firmware.
    let (shelf, shelf_port) = fake_board(model_hash, Vec::new());
    assert_eq!(register(&admin, "shelf", &shelf_port).0, 201);
    let push = |version: u32| {
        let body = json!({"model": "base", "version": version});
        let (status, job) =
            server.json("POST", "/api/v1/boards/shelf/push", Some(&trainer), Some(body));
        if status == 201 {
            let job =
                server.wait_for(job["id"].as_i64().unwrap(), &trainer, &["succeeded", "failed"]);
            assert_eq!(job["status"], "succeeded", "{job}");
        }
        (status, job)
    };
    assert_eq!(push(2).0, 201);
    assert!(shelf.lock().unwrap().checkpoint == pulled, "the pushed checkpoint differs");

    // Any other version goes as a checkpoint of its device bundle's state, if that bundle
    // differs from the board's only there: version 3 changes the head (pushed), version 4
    // a frozen layer (refused, naming why).
    let weights = |name: &str, values: Vec<f32>| {
        let tensors = [(name.to_string(), vec![values.len()], values)];
        let body = sprout_onnx::export_safetensors(&tensors).unwrap();
        let path = "/api/v1/models/base/versions/1/weights";
        let (status, bytes) =
            server.call("POST", path, Some(&trainer), Some(("application/octet-stream", body)));
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&bytes));
    };
    weights("classifier.bias", vec![0.5, -0.5, 0.25]);
    weights("features.0.bias", vec![0.125; 8]);
    let (header, _) = sprout_core::format::bundle::read_header(&bundle).unwrap();
    for (version, bias) in [(1, None), (3, Some([0.5f32, -0.5, 0.25]))] {
        let (status, job) = push(version);
        assert_eq!(status, 201, "{job}");
        let pushed = shelf.lock().unwrap().checkpoint.clone();
        let (info, state) = checkpoint::read(&pushed).unwrap();
        assert_eq!((info.model_hash, info.epoch, info.accuracy), (model_hash, 0, 0.0));
        let operand =
            header.trainable.iter().find(|t| t.name == "classifier.bias").unwrap().operand;
        let values: Vec<f32> = state[operand.offset..operand.offset + 12]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        match bias {
            Some(bias) => assert_eq!(values, bias),
            None => {
                let start = header.state.offset as usize;
                assert!(state == &bundle[start..start + state.len()], "not version 1's state");
            }
        }
    }
    let (status, body) = push(4);
    assert_eq!(status, 422, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("version 4 of 'base'") && message.contains("frozen"), "{message}");
    assert!(message.contains("new firmware"), "{message}");

    let (_, doc) = server.json("GET", "/api/v1/openapi.json", None, None);
    assert!(doc["paths"]["/api/v1/boards/{name}/pull"]["post"].is_object(), "{doc}");
    let (status, boards) = server.json("GET", "/api/v1/boards", Some(&trainer), None);
    assert_eq!((status, boards.as_array().unwrap().len()), (200, 2));
    assert_eq!(server.call("DELETE", "/api/v1/boards/shelf", Some(&trainer), None).0, 403);
    assert_eq!(server.call("DELETE", "/api/v1/boards/shelf", Some(&admin), None).0, 204);
    assert_eq!(server.call("GET", "/api/v1/boards/shelf", Some(&admin), None).0, 404);
}

#[test]
fn a_board_that_trains_from_its_input_is_streamed_the_images_every_epoch() {
    let (scratch, admin, trainer, server) = board_service("serve-board-stream");
    // The board's firmware bundle trains every layer, the first included, a sample a step.
    let path = scratch.path("streams.bundle");
    let model = scratch.path("tiny.sprout");
    ok(&["bundle", s(&model), "--trainable", "all", "--batch-size", "1", "-o", s(&path)]);
    let bundle = std::fs::read(&path).unwrap();
    let (header, _) = sprout_core::format::bundle::read_header(&bundle).unwrap();
    assert!(header.streams());
    let (bench, port) = fake_board_with(header.model_hash, device_checkpoint_of(&bundle), |app| {
        app.streams = true;
    });

    // Registered with the options its firmware's bundle was made with, or refused naming
    // what differs: the head-only default (stored samples), or a streamed update of other
    // tensors (the checkpoint it holds has another size).
    let register = |options: Value| {
        let body =
            json!({"name": "bench", "port": port, "model": "base", "bundle_options": options});
        server.json("POST", "/api/v1/boards", Some(&admin), Some(body))
    };
    let (status, body) = register(json!({}));
    assert_eq!(error(status, &body, "trains from its input"), 422);
    let (status, body) = register(json!({"trainable": "head,features.0.bias", "batch_size": 1}));
    assert_eq!(error(status, &body, "-byte checkpoint"), 422);
    let (status, body) = register(json!({"trainable": "all", "batch_size": 1, "epochs": 2}));
    assert_eq!(status, 422, "{body}");
    let (status, board) = register(json!({"trainable": "all", "batch_size": 1}));
    assert_eq!((status, &board["streams"]), (201, &json!(true)), "{board}");

    let train = |request: Value| {
        let (status, job) =
            server.json("POST", "/api/v1/boards/bench/train", Some(&trainer), Some(request));
        assert_eq!(status, 201, "{job}");
        job["id"].as_i64().unwrap()
    };
    let epochs_of = |id: i64| -> Vec<u64> {
        let events = server.events(id, &trainer).into_iter().filter(|e| e["kind"] == "epoch");
        events.map(|e| e["data"]["epoch"].as_u64().unwrap()).collect()
    };
    let request = json!({"dataset": "leaves", "epochs": 3, "keep_samples": true});
    let (status, body) =
        server.json("POST", "/api/v1/boards/bench/train", Some(&trainer), Some(request));
    assert_eq!(error(status, &body, "stores no sample"), 422);

    // A job streams the held-out images (the start's score), then every epoch all of
    // them, training ones first; each epoch is an event.
    let id = train(json!({"dataset": "leaves", "epochs": 3}));
    let job = server.wait_for(id, &trainer, &["succeeded", "failed"]);
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(epochs_of(id), [1, 2, 3]);
    {
        let app = bench.lock().unwrap();
        let held_out = |range: std::ops::Range<usize>| {
            app.streamed[range].iter().filter(|(_, split)| *split == Split::Validation).count()
        };
        // 5 images of each of 3 classes, one of each held out.
        assert_eq!((app.samples.len(), app.streamed.len()), (0, 3 + 3 * 15));
        assert_eq!((held_out(0..3), held_out(3..15), held_out(15..18)), (3, 0, 3));
    }

    // Cancelled mid-run, its process dies and the board is left on the run; the next job
    // stops that run and trains.
    bench.lock().unwrap().compute = Duration::from_millis(30);
    let id = train(json!({"dataset": "leaves", "epochs": 50}));
    server.wait_for_epoch(id, &trainer);
    let (status, _) =
        server.json("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&trainer), None);
    assert_eq!(status, 202);
    let started = Instant::now();
    server.wait_for(id, &trainer, &["cancelled"]);
    assert!(started.elapsed() < Duration::from_secs(10));
    let running = bench.lock().unwrap().progress();
    assert_eq!(running.state, TrainingState::Running, "{running:?}");
    assert!(running.epoch < 50, "{running:?}");
    bench.lock().unwrap().compute = Duration::ZERO;
    let id = train(json!({"dataset": "leaves", "epochs": 1}));
    let job = server.wait_for(id, &trainer, &["succeeded", "failed"]);
    assert_eq!(job["status"], "succeeded", "{job}");
    let events = server.events(id, &trainer);
    let stopped = events.iter().any(|e| {
        e["data"]["line"].as_str().is_some_and(|l| l.contains("was still training (epoch"))
    });
    assert!(stopped, "{events:#?}");
    assert_eq!(bench.lock().unwrap().progress().state, TrainingState::Finished);

    // The pull takes the checkpoint of the streamed update's bundle into the registry.
    pull_bench_into_version_2(&server, &trainer);
}

/// Pulls board `bench`'s checkpoint: version 2 of `base` must record the board and the
/// checkpoint's epoch (3, as [`device_checkpoint_of`] writes it).
fn pull_bench_into_version_2(server: &Server, trainer: &str) {
    let (status, job) =
        server.json("POST", "/api/v1/boards/bench/pull", Some(trainer), Some(json!({})));
    assert_eq!(status, 201, "{job}");
    let job = server.wait_for(job["id"].as_i64().unwrap(), trainer, &["succeeded", "failed"]);
    assert_eq!((job["status"].as_str(), job["version"].as_u64()), (Some("succeeded"), Some(2)));
    let (_, model) = server.json("GET", "/api/v1/models/base", Some(trainer), None);
    let metrics = &model["versions"][1]["metrics"];
    assert_eq!(
        (metrics["board"].as_str(), metrics["device_epoch"].as_u64()),
        (Some("bench"), Some(3)),
        "{model}"
    );
}

#[test]
fn a_board_job_killed_with_its_service_runs_again_and_takes_the_board_over() {
    let (scratch, admin, trainer, server) = board_service("serve-board-restart");
    let data = scratch.path("data");
    let (_, bundle) = server.call(
        "GET",
        "/api/v1/models/base/versions/1/file?format=bundle",
        Some(&trainer),
        None,
    );
    let model_hash = sprout_core::format::bundle::read_header(&bundle).unwrap().0.model_hash;
    let (bench, port) = fake_board(model_hash, device_checkpoint_of(&bundle));
    let body = json!({"name": "bench", "port": port, "model": "base"});
    assert_eq!(server.json("POST", "/api/v1/boards", Some(&admin), Some(body)).0, 201);
    // The fake board finishes an epoch per progress query (one each 500 ms).
    let request = json!({"dataset": "leaves", "epochs": 6});
    let (status, job) =
        server.json("POST", "/api/v1/boards/bench/train", Some(&trainer), Some(request));
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_i64().unwrap();

    // Killed (SIGKILL, with its `sprout device train` child) once the board reported an
    // epoch: the board trains on, for no one.
    server.wait_for_epoch(id, &trainer);
    drop(server);
    let snapshot = data.join("jobs").join(id.to_string()).join("data");
    let start = Instant::now();
    while !Command::new("pgrep").args(["-f", s(&snapshot)]).output().unwrap().stdout.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5), "sprout device outlived the service");
        std::thread::sleep(Duration::from_millis(20));
    }
    let samples = bench.lock().unwrap().samples.len();

    // Restarted: the job is queued again and runs from the start: it stops the board's
    // orphaned run, sends the samples again (replacing, not adding to, the first ones)
    // and trains all its epochs.
    let server = Server::start(&data, &[]);
    let job = server.wait_for(id, &trainer, &["succeeded", "failed"]);
    assert_eq!(job["status"], "succeeded", "{job}");
    let events = server.events(id, &trainer);
    let interrupted = events.iter().filter(|e| e["data"]["interrupted"] == true).count();
    assert_eq!(interrupted, 1, "{events:#?}");
    assert!(
        events.iter().any(|e| e["data"]["line"]
            .as_str()
            .is_some_and(|l| l.contains("was still training (epoch"))),
        "{events:#?}"
    );
    let after_restart = events
        .iter()
        .skip_while(|e| e["data"]["interrupted"] != true)
        .filter(|e| e["kind"] == "epoch")
        .map(|e| e["data"]["epoch"].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(after_restart.last(), Some(&6), "{events:#?}");
    assert_eq!(bench.lock().unwrap().samples.len(), samples, "the samples were replaced");
    // Nothing half-written is left: no staged upload or partial snapshot, and every stored
    // file is whole (named by the SHA-256 of its bytes).
    assert!(walk(&data.join("tmp")).is_empty(), "{:?}", walk(&data.join("tmp")));
    let partial = walk(&data).into_iter().find(|f| s(f).contains(".partial"));
    assert!(partial.is_none(), "{partial:?}");
    for file in walk(&data.join("models")).into_iter().chain(walk(&data.join("images"))) {
        let sum = Command::new("sha256sum").arg(&file).output().unwrap();
        let sum = String::from_utf8(sum.stdout).unwrap();
        let name = file.file_stem().unwrap().to_str().unwrap();
        assert_eq!(sum.split_whitespace().next(), Some(name), "{}", file.display());
    }
}

#[test]
fn tls_answers_https_ignores_plain_http_and_names_bad_files() {
    use std::io::{Read, Write};
    let scratch = Scratch::new("serve-tls");
    let data = scratch.path("data");
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (scratch.path("cert.pem"), scratch.path("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    let other_key = scratch.path("other-key.pem");
    std::fs::write(&other_key, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let serve = |cert: &Path, key: &Path, needle: &str| {
        let args = ["serve", "--data-dir", s(&data), "--listen", "127.0.0.1:0"];
        fails(&[&args[..], &["--tls-cert", s(cert), "--tls-key", s(key)]].concat(), needle);
    };
    serve(&scratch.path("missing.pem"), &key, "cannot read the TLS certificate");
    serve(&key, &key, "no certificate in it");
    serve(&cert, &cert, "no usable private key");
    serve(&cert, &other_key, "cannot serve the certificate");

    let server = Server::start(&data, &["--tls-cert", s(&cert), "--tls-key", s(&key)]);
    let address = server.base.strip_prefix("https://").expect("an https address").to_string();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = "localhost".try_into().unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, TcpStream::connect(&address).unwrap());
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    // The server may close without a TLS close_notify: what was read counts.
    let _ = tls.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"ok\""), "{answer}");

    let mut plain = TcpStream::connect(&address).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = plain.read_to_end(&mut reply);
    assert!(!reply.starts_with(b"HTTP/"), "plain HTTP was answered: {reply:?}");
}

/// The tensors of a safetensors download, by name.
fn tensors(bytes: &[u8]) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    sprout_onnx::read_safetensors(bytes).unwrap().into_iter().map(|(n, s, v)| (n, (s, v))).collect()
}

#[test]
fn weights_download_as_safetensors_upload_onto_a_version_and_evaluate() {
    let scratch = Scratch::new("serve-params");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let reader = token(&data, "read");
    let server = Server::start(&data, &[]);
    let photos = photos(&scratch, 4);
    upload_dataset(&server, &trainer, "leaves", &photos);
    upload_base(&server, &trainer, &scratch);
    let file = "/api/v1/models/base/versions/1/file?format=safetensors";
    let (status, all) = server.call("GET", file, Some(&reader), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&all));
    let all = tensors(&all);
    let names: Vec<&str> = all.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["classifier.bias", "classifier.weight", "features.0.bias", "features.0.weight"]
    );
    assert_eq!(all["classifier.weight"].0, [3, 8]);
    let (status, head) = server.call("GET", &format!("{file}&trainable=head"), Some(&reader), None);
    assert_eq!(status, 200);
    let head = tensors(&head);
    assert_eq!(head.keys().collect::<Vec<_>>(), ["classifier.bias", "classifier.weight"]);
    assert_eq!(head["classifier.weight"], all["classifier.weight"]);
    let (status, error) = server.json(
        "GET",
        "/api/v1/models/base/versions/1/file?format=onnx&trainable=head",
        Some(&reader),
        None,
    );
    assert_eq!(status, 422, "{error}");

    // A zero head: every logit 0, so the loss is ln 3 on any image.
    let zero: Vec<(String, Vec<usize>, Vec<f32>)> = head
        .iter()
        .map(|(name, (shape, values))| (name.clone(), shape.clone(), vec![0.0; values.len()]))
        .collect();
    let zero_bytes = sprout_onnx::export_safetensors(&zero).unwrap();
    let evaluate = "/api/v1/models/base/versions/1/evaluate?dataset=leaves";
    let body = Some(("application/octet-stream", zero_bytes.clone()));
    let (status, bytes) = server.call("POST", evaluate, Some(&reader), body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let zeroed: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(zeroed["samples"], photos.len(), "{zeroed}");
    assert_eq!(zeroed["weights_applied"], 2);
    assert!((zeroed["loss"].as_f64().unwrap() - 3f64.ln()).abs() < 1e-5, "{zeroed}");
    let (status, own) = server.json("POST", evaluate, Some(&reader), None);
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["weights_applied"], 0);
    assert!((own["loss"].as_f64().unwrap() - 3f64.ln()).abs() > 1e-4, "its own head: {own}");
    assert!((0.0..=1.0).contains(&own["accuracy"].as_f64().unwrap()));

    // Uploading the zero head makes version 2; the rest is version 1's.
    let weights = "/api/v1/models/base/versions/1/weights";
    let body = Some(("application/octet-stream", zero_bytes.clone()));
    let (status, _) = server.call("POST", weights, Some(&reader), body.clone());
    assert_eq!(status, 403, "read scope cannot register versions");
    let (status, bytes) = server.call("POST", weights, Some(&trainer), body);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&bytes));
    let applied: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(applied, json!({"model": "base", "base_version": 1, "version": 2, "tensors": 2}));
    let (_, v2) = server.call(
        "GET",
        "/api/v1/models/base/versions/2/file?format=safetensors",
        Some(&reader),
        None,
    );
    let v2 = tensors(&v2);
    assert_eq!(v2["classifier.weight"].1, vec![0.0; 24]);
    assert_eq!(v2["features.0.weight"], all["features.0.weight"]);
    let (_, model) = server.json("GET", "/api/v1/models/base", Some(&reader), None);
    assert_eq!(model["current_version"], 1, "not promoted: {model}");
    let (_, same) = server.json(
        "POST",
        "/api/v1/models/base/versions/2/evaluate?dataset=leaves",
        Some(&reader),
        None,
    );
    assert_eq!(same["loss"], zeroed["loss"]);

    // Bad weights are refused naming the tensor; nothing is registered.
    let bad = |name: &str, shape: Vec<usize>, values: Vec<f32>| {
        sprout_onnx::export_safetensors(&[(name.to_string(), shape, values)]).unwrap()
    };
    let cases = [
        (bad("classifier.weight", vec![8, 3], vec![0.0; 24]), "'classifier.weight': shape [8, 3]"),
        (bad("classifier.bias", vec![3], vec![0.0, f32::NAN, 0.0]), "'classifier.bias': value NaN"),
        (bad("head.weight", vec![1], vec![0.0]), "'head.weight': the model has no parameter"),
        (b"not safetensors".to_vec(), "cannot be applied"),
        (Vec::new(), "no tensors"),
    ];
    for (body, words) in cases {
        let body = Some(("application/octet-stream", body));
        let (status, bytes) = server.call("POST", weights, Some(&trainer), body);
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(status, 422, "{text}");
        assert!(text.contains(words), "{words}: {text}");
    }
    let (_, model) = server.json("GET", "/api/v1/models/base", Some(&reader), None);
    assert_eq!(model["versions"].as_array().unwrap().len(), 2);
    let body =
        Some(("application/octet-stream", bad("classifier.bias", vec![3], vec![f32::INFINITY; 3])));
    let (status, bytes) = server.call("POST", evaluate, Some(&reader), body);
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&bytes));
    let (status, _) = server.json(
        "POST",
        "/api/v1/models/base/versions/1/evaluate?dataset=nothing",
        Some(&reader),
        None,
    );
    assert_eq!(status, 404);
    let (status, _) =
        server.json("POST", "/api/v1/models/base/versions/9/weights", Some(&trainer), None);
    assert_eq!(status, 404);
}

#[test]
fn a_job_takes_a_gradient_offset_checked_against_its_base() {
    use base64::Engine;
    let scratch = Scratch::new("serve-offset");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let server = Server::start(&data, &[]);
    upload_dataset(&server, &trainer, "leaves", &photos(&scratch, 4));
    upload_base(&server, &trainer, &scratch);
    let job = |offset: Value| {
        let request = json!({"dataset": "leaves", "base": {"model": {"name": "base"}},
            "model": "base", "epochs": 1, "batch_size": 4, "gradient_offset": offset});
        server.json("POST", "/api/v1/jobs", Some(&trainer), Some(request))
    };
    let encoded = |name: &str, shape: Vec<usize>, values: Vec<f32>| {
        let bytes = sprout_onnx::export_safetensors(&[(name.to_string(), shape, values)]).unwrap();
        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let cases = [
        (json!("not base64!"), "gradient_offset is not base64"),
        (json!("AAAA"), "gradient_offset cannot be read"),
        (encoded("head.bias", vec![3], vec![0.0; 3]), "'head.bias': not a trainable parameter"),
        (encoded("classifier.bias", vec![4], vec![0.0; 4]), "'classifier.bias': shape [4]"),
        (encoded("classifier.bias", vec![3], vec![0.0, f32::NAN, 0.0]), "holds NaN"),
    ];
    for (offset, words) in cases {
        let (status, body) = job(offset);
        assert_eq!(error(status, &body, words), 422);
    }
    let zoo = json!({"dataset": "leaves", "base": {"zoo": "mlp"}, "gradient_offset": "AAAA"});
    let (status, body) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(zoo));
    assert_eq!(error(status, &body, "the base is a zoo model"), 422);
    let (_, jobs) = server.json("GET", "/api/v1/jobs", Some(&trainer), None);
    assert_eq!(jobs, json!([]), "no refused job queued");

    // Accepted: kept in the job's folder, handed to `sprout train`, not shown by the API.
    let (status, created) = job(encoded("classifier.bias", vec![3], vec![0.5, -0.5, 0.0]));
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    assert!(created["request"].get("gradient_offset").is_none(), "{created}");
    let done = server.wait_for(id, &trainer, &["succeeded", "failed"]);
    assert_eq!(done["status"], "succeeded", "{done}");
    let folder = data.join(format!("jobs/{id}"));
    let kept = std::fs::read(folder.join("gradient-offset.safetensors")).unwrap();
    assert_eq!(tensors(&kept)["classifier.bias"].1, [0.5, -0.5, 0.0]);
    let args = std::fs::read_to_string(folder.join("run/args.json")).unwrap();
    assert!(args.contains("--gradient-offset"), "{args}");
}

#[test]
fn versions_nothing_needs_can_be_deleted_and_their_numbers_stay_unused() {
    let scratch = Scratch::new("serve-delete-version");
    let data = scratch.path("data");
    let trainer = token(&data, "train");
    let reader = token(&data, "read");
    let server = Server::start(&data, &[]);
    upload_dataset(&server, &trainer, "leaves", &photos(&scratch, 4));
    upload_base(&server, &trainer, &scratch);
    // Versions 2 and 3: the same zero head applied twice, so one file for both.
    let zero =
        sprout_onnx::export_safetensors(&[("classifier.bias".into(), vec![3], vec![0.0; 3])])
            .unwrap();
    for _ in 0..2 {
        let body = Some(("application/octet-stream", zero.clone()));
        let path = "/api/v1/models/base/versions/1/weights";
        assert_eq!(server.call("POST", path, Some(&trainer), body).0, 201);
    }
    let (_, model) = server.json("GET", "/api/v1/models/base", Some(&reader), None);
    let hash = |v: usize| model["versions"][v - 1]["hash"].as_str().unwrap().to_string();
    let file = |hash: &str| data.join("models").join(format!("{hash}.sprout"));
    assert_eq!(hash(2), hash(3));
    let versions = |server: &Server| {
        let (_, model) = server.json("GET", "/api/v1/models/base", Some(&reader), None);
        let list = model["versions"].as_array().unwrap();
        list.iter().map(|v| v["version"].as_u64().unwrap()).collect::<Vec<_>>()
    };
    let delete = |version: u32, token: &str| {
        server.json("DELETE", &format!("/api/v1/models/base/versions/{version}"), Some(token), None)
    };

    assert_eq!(delete(3, &reader).0, 403, "read scope cannot delete");
    let (status, body) = delete(1, &trainer);
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("the current version"), "{body}");
    let (status, body) = delete(3, &trainer);
    assert_eq!(status, 200, "{body}");
    assert!(file(&hash(2)).exists(), "version 2 still has the file");
    assert_eq!(versions(&server), [1, 2]);
    assert_eq!(delete(2, &trainer).0, 200);
    assert!(!file(&hash(2)).exists(), "no version has the file any more");
    assert!(file(&hash(1)).exists());
    assert_eq!(versions(&server), [1]);
    assert_eq!(delete(2, &trainer).0, 404);
    assert_eq!(delete(9, &trainer).0, 404);
    assert_eq!(
        server.json("DELETE", "/api/v1/models/nothing/versions/1", Some(&trainer), None).0,
        404
    );

    // The next version is 4: a deleted number is not given again.
    let weights = |server: &Server| {
        let body = Some(("application/octet-stream", zero.clone()));
        let path = "/api/v1/models/base/versions/1/weights";
        let (status, bytes) = server.call("POST", path, Some(&trainer), body);
        assert_eq!(status, 201);
        serde_json::from_slice::<Value>(&bytes).unwrap()["version"].as_u64().unwrap()
    };
    assert_eq!(weights(&server), 4);
    assert!(file(&hash(2)).exists(), "the same bytes are stored again");

    // A job that has not ended keeps the version it starts from.
    let long = json!({"dataset": "leaves", "base": {"model": {"name": "base", "version": 4}},
        "model": "other", "epochs": 5000, "batch_size": 4});
    let (status, job) = server.json("POST", "/api/v1/jobs", Some(&trainer), Some(long));
    assert_eq!(status, 201, "{job}");
    let (status, body) = delete(4, &trainer);
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains(&format!("job {}", job["id"])), "{body}");
    let cancel = format!("/api/v1/jobs/{}/cancel", job["id"]);
    assert_eq!(server.json("POST", &cancel, Some(&trainer), None).0, 202);
    server.wait_for(job["id"].as_i64().unwrap(), &trainer, &["cancelled"]);
    assert_eq!(delete(4, &trainer).0, 200);

    // Once another version is promoted, the old current one is what rollback returns to.
    let fifth = weights(&server);
    assert_eq!(fifth, 5);
    let promote = Some(json!({"version": fifth}));
    assert_eq!(server.json("POST", "/api/v1/models/base/promote", Some(&trainer), promote).0, 200);
    let (status, body) = delete(1, &trainer);
    assert_eq!(status, 409);
    assert!(body["error"].as_str().unwrap().contains("rollback returns to"), "{body}");
    assert_eq!(versions(&server), [1, 5]);
}

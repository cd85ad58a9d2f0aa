//! The web page of `sprout serve` in a real headless Chromium driven over WebDriver: a
//! refused token, a read token refused a change (403), then a train token; a data set
//! created and filled with photos and a zip (per-file report), a base model uploaded, a job
//! started whose live loss curve grows until it succeeds, its new version listed,
//! predicting and downloaded; a version promoted and rolled back; a running job cancelled,
//! its time left gone; at phone width nothing overflows. Screenshots are kept at
//! `target/web-test/serve.png` and `serve-phone.png`.
//!
//! Skipped, with a message, when `chromium` or `chromedriver` do not run, unless
//! `SPROUT_REQUIRE_BROWSER=1` (set by `cargo xtask test web`, which installs them).

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{ok, s, serve_token, start_serve, tiny_model, Scratch};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const CHROMIUM: &str = "chromium";
const CHROMEDRIVER: &str = "chromedriver";

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `PROGRAM --version` runs.
fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Starts chromedriver on a free loopback port; returns it and its URL once it answers.
fn chromedriver() -> (Killed, String) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Killed(child);
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while ureq::get(&format!("{url}/status")).call().is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "chromedriver does not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    (driver, url)
}

/// Headless Chromium flags that work as root on a closed network.
fn capabilities(profile: &Path) -> serde_json::Map<String, Value> {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        &format!("--user-data-dir={}", s(profile)),
    ];
    let options = json!({"goog:chromeOptions": {"args": args}});
    options.as_object().unwrap().clone()
}

/// Waits (at most `seconds`) until `script` returns a value JavaScript calls true; returns it.
async fn until(client: &Client, seconds: u64, what: &str, script: &str) -> Value {
    let start = Instant::now();
    loop {
        let value = client.execute(script, vec![]).await.unwrap();
        let falsy = match &value {
            Value::Null | Value::Bool(false) => true,
            Value::String(text) => text.is_empty(),
            Value::Number(n) => n.as_f64() == Some(0.0),
            _ => false,
        };
        if !falsy {
            return value;
        }
        if start.elapsed() > Duration::from_secs(seconds) {
            let message = client
                .execute("return document.getElementById('message').textContent", vec![])
                .await;
            panic!("waited {seconds} s for {what}; the page says: {message:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn fill(client: &Client, id: &str, text: &str) {
    let input = client.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

async fn click(client: &Client, id: &str) {
    client.find(Locator::Id(id)).await.unwrap().click().await.unwrap();
}

async fn select(client: &Client, id: &str, value: &str) {
    client.find(Locator::Id(id)).await.unwrap().select_by_value(value).await.unwrap();
}

async fn click_css(client: &Client, css: &str) {
    client.find(Locator::Css(css)).await.unwrap().click().await.unwrap();
}

/// The body of `GET url` with `token`.
fn fetch(url: &str, token: &str) -> Vec<u8> {
    let mut response =
        ureq::get(url).header("Authorization", format!("Bearer {token}")).call().unwrap();
    response.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap()
}

/// The message banner's text ("" when hidden).
const MESSAGE: &str =
    "const m = document.getElementById('message'); return m.hidden ? '' : m.textContent;";

/// The workspace's `target/` folder: three levels above this test binary.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).expect("target/debug/deps/TEST").to_path_buf()
}

#[tokio::test(flavor = "current_thread")]
async fn the_page_uploads_trains_with_a_live_curve_and_shows_the_new_version() {
    if !(runs(CHROMIUM) && runs(CHROMEDRIVER)) {
        assert!(
            std::env::var_os("SPROUT_REQUIRE_BROWSER").is_none(),
            "SPROUT_REQUIRE_BROWSER is set but `{CHROMIUM} --version` or `{CHROMEDRIVER} \
             --version` fails"
        );
        println!(
            "skipped: `{CHROMIUM}` or `{CHROMEDRIVER}` does not run (`cargo xtask test web` \
             installs them: apt-get install chromium chromium-driver)"
        );
        return;
    }
    let scratch = Scratch::new("web");
    let data = scratch.path("data");
    let (reader, trainer) = (serve_token(&data, "read"), serve_token(&data, "train"));
    let (server, base) = start_serve(&data, &[]);
    let _server = Killed(server);
    let leaves = scratch.path("leaves");
    ok(&["data", "leaves", "-o", s(&leaves), "--per-class", "4", "--size", "32"]);
    let model = scratch.path("tiny.sprout");
    tiny_model(&model);

    let (_driver, driver_url) = chromedriver();
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities(&scratch.path("profile")))
        .connect(&driver_url)
        .await
        .expect("a Chromium session");

    client.goto(&base).await.unwrap();
    assert_eq!(client.title().await.unwrap(), "sprout serve");

    // A refused token: the 401 is explained and nothing is shown.
    fill(&client, "token", "sprout_0000").await;
    click(&client, "token-save").await;
    let message = until(&client, 10, "the 401 message", MESSAGE).await;
    let message = message.as_str().unwrap();
    assert!(message.contains("401") && message.contains("unknown token"), "{message}");
    let hidden = client.execute("return document.getElementById('datasets').hidden", vec![]);
    assert_eq!(hidden.await.unwrap(), json!(true));

    // A read token sees the page; what it may not do is explained with the scope it lacks.
    fill(&client, "token", &reader).await;
    click(&client, "token-save").await;
    until(&client, 10, "the data sets", "return !document.getElementById('datasets').hidden").await;
    fill(&client, "dataset-name", "refused").await;
    fill(&client, "dataset-classes", "a, b").await;
    click(&client, "dataset-create").await;
    let message = until(&client, 10, "the 403 message", MESSAGE).await;
    let message = message.as_str().unwrap();
    assert!(message.contains("(403)") && message.contains("scope 'train'"), "{message}");

    fill(&client, "token", &trainer).await;
    click(&client, "token-save").await;
    let boards = "return document.getElementById('boards-status').textContent";
    let boards = until(&client, 10, "the boards section", boards).await;
    // The board API may not be part of this service: either way the section says so.
    let boards = boards.as_str().unwrap();
    let listed = boards.ends_with(" board.") || boards.ends_with(" boards.");
    let none = ["This service has no board API.", "No boards registered."].contains(&boards);
    assert!(listed || none, "{boards}");

    fill(&client, "dataset-name", "leaves").await;
    fill(&client, "dataset-classes", "healthy, leaf_spot, rust").await;
    click(&client, "dataset-create").await;
    until(
        &client,
        10,
        "the new data set",
        "return !!document.querySelector('[data-dataset=leaves]')",
    )
    .await;

    // The photos of each class, picked in the file input as a user would.
    let mut uploaded = 0;
    for class in ["healthy", "leaf_spot", "rust"] {
        let mut files: Vec<String> = Vec::new();
        for split in ["train", "val"] {
            for entry in std::fs::read_dir(leaves.join(split).join(class)).unwrap() {
                files.push(entry.unwrap().path().to_string_lossy().into_owned());
            }
        }
        uploaded += files.len();
        select(&client, "upload-class", class).await;
        client
            .find(Locator::Id("upload-files"))
            .await
            .unwrap()
            .send_keys(&files.join("\n"))
            .await
            .unwrap();
        click(&client, "upload-submit").await;
        let summary = format!("{} added, 0 duplicate, 0 rejected", files.len());
        let script = format!(
            "const s = document.getElementById('upload-summary'); \
             return s && s.textContent === '{summary}' && \
             document.getElementById('upload-submit').disabled === false"
        );
        until(&client, 20, &format!("the upload of {class}"), &script).await;
    }
    let images = "return document.querySelector('[data-dataset=leaves] td').textContent";
    assert_eq!(client.execute(images, vec![]).await.unwrap(), json!(uploaded.to_string()));

    // A zip of class folders: each entry reported on its own, the rejected ones say why.
    let zip_path = scratch.path("more.zip");
    let photo = std::fs::read_dir(leaves.join("val").join("rust")).unwrap().next().unwrap();
    let photo = std::fs::read(photo.unwrap().path()).unwrap();
    // The same photo with one pixel changed: a new image.
    let mut changed = image::load_from_memory(&photo).unwrap().to_rgb8();
    let pixel = changed.get_pixel_mut(0, 0);
    pixel.0[0] = pixel.0[0].wrapping_add(128);
    let mut fresh = Vec::new();
    changed.write_to(&mut std::io::Cursor::new(&mut fresh), image::ImageFormat::Png).unwrap();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&zip_path).unwrap());
    let entries: [(&str, &[u8]); 3] =
        [("rust/flipped.png", &fresh), ("rust/same.png", &photo), ("../rust/up.png", &fresh)];
    for (name, bytes) in entries {
        zip.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut zip, bytes).unwrap();
    }
    zip.finish().unwrap();
    client.find(Locator::Id("upload-files")).await.unwrap().send_keys(s(&zip_path)).await.unwrap();
    click(&client, "upload-submit").await;
    let report = "const s = document.getElementById('upload-summary'); \
                  return s && s.textContent === '1 added, 1 duplicate, 1 rejected' && \
                  [...document.querySelectorAll('#upload-report li')].map(li => li.textContent)";
    let report = until(&client, 20, "the zip's report", report).await;
    let lines: Vec<&str> = report.as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(lines[0].starts_with("added more.zip/rust/flipped.png (rust)"), "{lines:?}");
    assert!(lines[1].starts_with("duplicate more.zip/rust/same.png (rust)"), "{lines:?}");
    assert!(lines[2].contains("rejected more.zip/../rust/up.png"), "{lines:?}");
    assert!(lines[2].contains("leaves the archive"), "{lines:?}");
    let open = "return document.querySelector('#upload-report details').open";
    assert_eq!(client.execute(open, vec![]).await.unwrap(), json!(true));

    // The base model, uploaded as version 1 of `base`.
    fill(&client, "model-upload-name", "base").await;
    client
        .find(Locator::Id("model-upload-file"))
        .await
        .unwrap()
        .send_keys(s(&model))
        .await
        .unwrap();
    click(&client, "model-upload").await;
    until(&client, 10, "the base model", "return !!document.querySelector('[data-model=base]')")
        .await;

    // A short job from it; the page follows its events.
    select(&client, "job-dataset", "leaves").await;
    select(&client, "job-base", "model:base").await;
    fill(&client, "job-epochs", "2").await;
    fill(&client, "job-batch", "2").await;
    click(&client, "job-start").await;
    let curve = "const c = document.getElementById('curve'); \
                 return !document.getElementById('curve-box').hidden && \
                 Number(c.getAttribute('data-points')) >= 1";
    until(&client, 60, "the curve's first point", curve).await;
    let done = "const row = document.querySelector('[data-job]'); \
                const points = Number(document.getElementById('curve').getAttribute('data-points')); \
                return row && row.dataset.status === 'succeeded' && points >= 2 && points";
    let points = until(&client, 120, "the job to succeed with 2 points", done).await;
    assert!(points.as_u64().unwrap() >= 2);
    let summary = "return document.getElementById('curve-summary').textContent";
    let summary = client.execute(summary, vec![]).await.unwrap();
    assert!(summary.as_str().unwrap().starts_with("succeeded: version 1"), "{summary}");
    let lines = "return document.querySelectorAll('#curve polyline, #curve circle').length";
    assert!(client.execute(lines, vec![]).await.unwrap().as_u64().unwrap() >= 2);

    // The new version is listed as current, and predicts.
    let version =
        "return !!document.querySelector('[data-model=leaves] tr.current[data-version=\"1\"]')";
    until(&client, 20, "version 1 of leaves", version).await;
    select(&client, "predict-model", "leaves").await;
    let photo = leaves.join("val").join("rust");
    let photo = std::fs::read_dir(&photo).unwrap().next().unwrap().unwrap().path();
    client.find(Locator::Id("predict-file")).await.unwrap().send_keys(s(&photo)).await.unwrap();
    click(&client, "predict-submit").await;
    let top = "return document.querySelectorAll('#predict-result li').length === 3 && \
               [...document.querySelectorAll('#predict-result .class')].map(e => e.textContent)";
    let classes = until(&client, 20, "the prediction", top).await;
    let mut classes: Vec<&str> =
        classes.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    classes.sort_unstable();
    assert_eq!(classes, ["healthy", "leaf_spot", "rust"]);
    assert_eq!(client.execute(MESSAGE, vec![]).await.unwrap(), json!(""));

    // Downloads: the page fetches the file with the token and saves it through a blob
    // link, whose click is recorded here instead (headless Chromium saves nowhere).
    let record = "window.saved = []; const create = URL.createObjectURL; \
                  URL.createObjectURL = (blob) => { window.blobSize = blob.size; return create(blob); }; \
                  HTMLAnchorElement.prototype.click = function () { \
                    window.saved.push([this.download, window.blobSize]); };";
    client.execute(record, vec![]).await.unwrap();
    click_css(&client, "button[aria-label='Download version 1 of leaves as .sprout']").await;
    let saved =
        until(&client, 20, "the download", "return window.saved.length && window.saved").await;
    let file = fetch(&format!("{base}/api/v1/models/leaves/versions/1/file"), &trainer);
    assert_eq!(saved, json!([["leaves-v1.sprout", file.len()]]));

    // Promote and roll back: the trained model uploaded as version 2 of `base`.
    let trained = scratch.path("leaves-v1.sprout");
    std::fs::write(&trained, &file).unwrap();
    fill(&client, "model-upload-name", "base").await;
    let input = client.find(Locator::Id("model-upload-file")).await.unwrap();
    input.send_keys(s(&trained)).await.unwrap();
    click(&client, "model-upload").await;
    let row = |version: u32, current: &str| {
        format!("return !!document.querySelector('[data-model=base] tr{current}[data-version=\"{version}\"]')")
    };
    until(&client, 10, "version 2 of base", &row(2, ":not(.current)")).await;
    click_css(&client, "button[aria-label='Make version 2 of base current']").await;
    until(&client, 10, "version 2 current", &row(2, ".current")).await;
    let message = until(&client, 10, "the promotion message", MESSAGE).await;
    assert_eq!(message, json!("base: version 2 is current."));
    click_css(&client, "[data-model=base] .head button").await;
    until(&client, 10, "version 1 current again", &row(1, ".current")).await;
    let message = until(&client, 10, "the rollback message", MESSAGE).await;
    assert_eq!(message, json!("base: rolled back to version 1."));

    // A long job, cancelled from its row once it runs.
    fill(&client, "job-epochs", "5000").await;
    click(&client, "job-start").await;
    let running = "const row = document.querySelector('[data-job]'); \
                   return row && row.dataset.job !== '1' && row.dataset.status === 'running' && row.dataset.job";
    let id = until(&client, 30, "the second job running", running).await;
    let id = id.as_str().unwrap().to_string();
    let left = "return document.getElementById('curve-summary').textContent.includes(' s left')";
    until(&client, 30, "the running job's time left", left).await;
    click_css(&client, &format!("button[aria-label='Cancel job {id}']")).await;
    let cancelled = format!(
        "return document.querySelector('[data-job=\"{id}\"]').dataset.status === 'cancelled'"
    );
    until(&client, 20, "the job cancelled", &cancelled).await;
    // Its last progress stays, without the time that was left.
    let summary = "const t = document.getElementById('curve-summary').textContent; \
                   return t.startsWith('cancelled') && t";
    let summary = until(&client, 10, "the cancelled job's summary", summary).await;
    let summary = summary.as_str().unwrap();
    assert!(summary.contains("epoch") && !summary.contains("left"), "{summary}");
    let job = fetch(&format!("{base}/api/v1/jobs/{id}"), &trainer);
    let job: Value = serde_json::from_slice(&job).unwrap();
    assert_eq!(job["status"], "cancelled", "{job}");

    // The whole page in one picture, then phone width: nothing wider than the screen.
    let height = "return document.documentElement.scrollHeight";
    let height = client.execute(height, vec![]).await.unwrap().as_u64().unwrap();
    client.set_window_size(1280, height.clamp(900, 4000) as u32 + 120).await.unwrap();
    client.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let shots = target_dir().join("web-test");
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(shots.join("serve.png"), &png).unwrap();
    client.set_window_size(390, 844).await.unwrap();
    let phone = "return window.innerWidth <= 400 && \
                 {overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth}";
    let phone = until(&client, 5, "the phone layout", phone).await;
    client.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
    let png = client.screenshot().await.unwrap();
    std::fs::write(shots.join("serve-phone.png"), png).unwrap();
    assert_eq!(phone["overflow"], json!(0), "the page is wider than a phone");
    client.close().await.unwrap();
}

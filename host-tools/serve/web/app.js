// The page of `sprout serve`: talks to /api/v1 with the bearer token the user entered (kept
// in sessionStorage), and builds every element with the DOM API (text, never markup).
"use strict";

const TOKEN_KEY = "sprout-token";
const TERMINAL = ["succeeded", "failed", "cancelled"];
const $ = (id) => document.getElementById(id);

// ---- The API ----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// `fetch` with the token; throws an ApiError carrying the service's JSON `error` on a non-2xx.
async function request(method, path, body, type) {
  const headers = { Authorization: "Bearer " + token() };
  if (type) headers["Content-Type"] = type;
  let response;
  try {
    response = await fetch(path, { method, headers, body });
  } catch (error) {
    throw new ApiError(0, "the service cannot be reached (" + error.message + ")");
  }
  if (!response.ok) {
    let message = response.statusText;
    try {
      const answer = await response.json();
      if (answer && typeof answer.error === "string") message = answer.error;
    } catch (_) {
      // Not JSON: keep the status text.
    }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function getJson(path) {
  return (await request("GET", path)).json();
}

async function sendJson(method, path, value) {
  const response = await request(method, path, value === undefined ? undefined : JSON.stringify(value), "application/json");
  return response.status === 204 ? null : response.json();
}

// What the user reads for a failure: the status explained, then the service's own words.
function describe(error) {
  if (!(error instanceof ApiError)) return String(error);
  const why = {
    0: "Network error",
    400: "Bad request (400)",
    401: "Token refused (401): enter a valid token",
    403: "Not allowed with this token's scope (403)",
    404: "Not found (404)",
    409: "Conflict (409)",
    413: "Too large (413)",
    422: "Cannot be used (422)",
  }[error.status] || "Error " + error.status;
  return why + ": " + error.message;
}

function showMessage(text, kind) {
  const box = $("message");
  box.textContent = text;
  box.className = "message " + (kind || "error");
  box.hidden = false;
}

function clearMessage() {
  $("message").hidden = true;
}

// Runs `work`, showing its failure in the banner; a 401 sends the user back to the token.
async function attempt(work) {
  try {
    return await work();
  } catch (error) {
    showMessage(describe(error));
    if (error instanceof ApiError && error.status === 401) $("token").focus();
    return undefined;
  }
}

// ---- Small DOM helpers ------------------------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "onClick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== undefined && child !== null) node.append(child);
  }
  return node;
}

function button(text, onClick, extra) {
  return el("button", Object.assign({ type: "button", text, onClick }, extra || {}));
}

function fillSelect(select, options, keep) {
  const previous = keep ? select.value : "";
  select.replaceChildren(...options.map(([value, label]) => el("option", { value, text: label })));
  if (options.some(([value]) => value === previous)) select.value = previous;
}

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "";
}

// ---- Data sets --------------------------------------------------------------------------

let datasets = [];

async function loadDatasets() {
  datasets = await getJson("/api/v1/datasets");
  const rows = datasets.map((set) =>
    el("tr", { "data-dataset": set.name },
      el("th", { scope: "row", text: set.name }),
      el("td", { text: String(set.images) }),
      el("td", { text: set.classes.map((c) => c.name + " " + c.images).join(", ") }),
      el("td", {}, button("Delete", () => deleteDataset(set.name), { class: "quiet danger", "aria-label": "Delete data set " + set.name }))));
  $("dataset-table").tBodies[0].replaceChildren(...rows);
  $("dataset-table").hidden = rows.length === 0;
  $("dataset-empty").hidden = rows.length > 0;
  const names = datasets.map((set) => [set.name, set.name]);
  fillSelect($("upload-dataset"), names, true);
  fillSelect($("job-dataset"), names, true);
  fillUploadClasses();
}

function fillUploadClasses() {
  const set = datasets.find((s) => s.name === $("upload-dataset").value);
  const classes = set ? set.classes.map((c) => [c.name, c.name]) : [];
  fillSelect($("upload-class"), classes, true);
}

async function deleteDataset(name) {
  if (!confirm("Delete data set " + name + " and its images?")) return;
  await attempt(async () => {
    await request("DELETE", "/api/v1/datasets/" + encodeURIComponent(name));
    showMessage("Deleted data set " + name + ".", "ok");
    await loadDatasets();
  });
}

async function createDataset(event) {
  event.preventDefault();
  const name = $("dataset-name").value.trim();
  const classes = $("dataset-classes").value.split(",").map((c) => c.trim()).filter((c) => c);
  await attempt(async () => {
    await sendJson("POST", "/api/v1/datasets", { name, classes });
    clearMessage();
    $("dataset-form").reset();
    await loadDatasets();
    $("upload-dataset").value = name;
    fillUploadClasses();
  });
}

// One multipart part per file: images under the chosen class, a zip under `archive`.
async function upload(event) {
  event.preventDefault();
  const name = $("upload-dataset").value;
  const form = new FormData();
  for (const file of $("upload-files").files) {
    const zip = file.name.toLowerCase().endsWith(".zip");
    form.append(zip ? "archive" : $("upload-class").value, file, file.name);
  }
  const submit = $("upload-submit");
  submit.disabled = true;
  submit.textContent = "Uploading…";
  await attempt(async () => {
    const report = await (await request("POST", "/api/v1/datasets/" + encodeURIComponent(name) + "/images", form)).json();
    clearMessage();
    showReport(report);
    $("upload-files").value = "";
    await loadDatasets();
  });
  submit.disabled = false;
  submit.textContent = "Upload";
}

function showReport(report) {
  const summary = el("p", { id: "upload-summary", text: report.added + " added, " + report.duplicates + " duplicate, " + report.rejected + " rejected" });
  const items = report.files.map((file) =>
    el("li", { class: file.status },
      el("strong", { text: file.status }), " " + file.name + (file.class ? " (" + file.class + ")" : ""),
      file.detail ? el("span", { class: "muted", text: " " + file.detail }) : null));
  const details = el("details", { open: report.rejected > 0 }, el("summary", { text: "Per file" }), el("ul", {}, ...items));
  $("upload-report").replaceChildren(summary, details);
}

// ---- Jobs and the live curve ------------------------------------------------------------

let jobs = [];
let jobPoll = null;
// Requests of the job list so far: an answer older than the newest request is dropped.
let jobLoads = 0;

// The job list. A row whose job did not change is kept as it is, so the table can be
// reloaded (every few seconds while a job runs) under a pointer that is clicking one of
// its buttons.
async function loadJobs() {
  const load = ++jobLoads;
  const list = await getJson("/api/v1/jobs");
  if (load !== jobLoads) return;
  jobs = list.sort((a, b) => b.id - a.id);
  const shown = new Map([...$("job-table").tBodies[0].rows].map((row) => [row.dataset.job, row]));
  const rows = jobs.map((job) => {
    const key = JSON.stringify([job.status, job.error, job.version, job.estimate_bytes, job.dataset, job.model]);
    const old = shown.get(String(job.id));
    if (old && old.dataset.key === key) return old;
    const actions = el("td", { class: "actions" },
      button("Curve", () => follow(job.id), { class: "quiet", "aria-label": "Show the loss curve of job " + job.id }));
    if (!TERMINAL.includes(job.status)) {
      actions.append(button("Cancel", () => cancelJob(job.id), { class: "quiet danger", "aria-label": "Cancel job " + job.id }));
    }
    return el("tr", { "data-job": job.id, "data-status": job.status, "data-key": key },
      el("th", { scope: "row", text: "#" + job.id }),
      el("td", { text: job.dataset }),
      el("td", { text: job.model }),
      el("td", {}, el("span", { class: "status " + job.status, text: job.status }), job.error ? el("div", { class: "muted small", text: job.error }) : null),
      el("td", { text: job.version ? "v" + job.version : "" }),
      el("td", { text: bytes(job.estimate_bytes) }),
      actions);
  });
  const body = $("job-table").tBodies[0];
  if (rows.length !== body.rows.length || rows.some((row, i) => row !== body.rows[i])) body.replaceChildren(...rows);
  $("job-table").hidden = rows.length === 0;
  $("job-empty").hidden = rows.length > 0;
  // While a job is queued or running, look again every few seconds.
  clearTimeout(jobPoll);
  if (jobs.some((job) => !TERMINAL.includes(job.status))) {
    jobPoll = setTimeout(() => attempt(loadJobs), 3000);
  }
}

async function cancelJob(id) {
  await attempt(async () => {
    await sendJson("POST", "/api/v1/jobs/" + id + "/cancel");
    await loadJobs();
  });
}

function number(id) {
  const text = $(id).value.trim();
  return text === "" ? undefined : Number(text);
}

async function startJob(event) {
  event.preventDefault();
  const [kind, name] = $("job-base").value.split(":");
  const job = {
    dataset: $("job-dataset").value,
    base: kind === "zoo" ? { zoo: name } : { model: { name } },
    trainable: $("job-trainable").value,
    optimizer: $("job-optimizer").value,
    lr: number("job-lr"),
    epochs: number("job-epochs"),
    batch_size: number("job-batch"),
    seed: number("job-seed"),
    new_head: $("job-new-head").checked,
    promote: $("job-promote").checked,
  };
  const model = $("job-model").value.trim();
  if (model) job.model = model;
  await attempt(async () => {
    const created = await sendJson("POST", "/api/v1/jobs", job);
    clearMessage();
    await loadJobs();
    follow(created.id);
  });
}

// The curve being drawn: one job's loss per batch and per epoch.
const curve = { job: null, stop: null, steps: 1, batch: [], train: [], val: [], status: "", last: 0 };

// Follows job `id`'s events with a streaming fetch (EventSource cannot send the token),
// reconnecting after a dropped connection from the last event seen.
function follow(id) {
  if (curve.stop) curve.stop.abort();
  Object.assign(curve, { job: id, stop: new AbortController(), steps: 1, batch: [], train: [], val: [], status: "", last: 0 });
  $("curve-box").hidden = false;
  $("curve-title").textContent = "Loss of job #" + id;
  $("curve-summary").textContent = "waiting for events…";
  // The last progress shown belongs to the job followed before.
  delete $("curve-summary").dataset.last;
  drawCurve();
  readEvents(id, curve.stop.signal);
}

async function readEvents(id, signal) {
  while (!signal.aborted && !TERMINAL.includes(curve.status)) {
    try {
      const headers = { Authorization: "Bearer " + token(), Accept: "text/event-stream" };
      if (curve.last) headers["Last-Event-ID"] = String(curve.last);
      const response = await fetch("/api/v1/jobs/" + id + "/events", { headers, signal });
      if (!response.ok) {
        const answer = await response.json().catch(() => ({ error: response.statusText }));
        throw new ApiError(response.status, answer.error);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          handleMessage(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError) {
        showMessage(describe(error));
        return;
      }
    }
    if (!TERMINAL.includes(curve.status) && !signal.aborted) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

// One SSE message: `id:`, `event:` and `data:` lines; comments (keep-alives) are skipped.
function handleMessage(block) {
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    else if (line.startsWith("id:")) curve.last = Number(line.slice(3).trim()) || curve.last;
  }
  if (data.length === 0) return;
  const event = JSON.parse(data.join("\n"));
  const d = event.data || {};
  if (event.kind === "start") {
    curve.steps = d.batches || curve.steps;
  } else if (event.kind === "progress") {
    curve.steps = d.steps_per_epoch || curve.steps;
    curve.batch.push([d.step / curve.steps, d.loss]);
    summarize("epoch " + d.epoch + ", batch " + (d.batch + 1) + "/" + d.steps_per_epoch + " · loss " + fixed(d.loss) + speed(d), eta(d));
  } else if (event.kind === "epoch") {
    curve.train.push([d.epoch, d.train_loss]);
    if (typeof d.val_loss === "number") curve.val.push([d.epoch, d.val_loss]);
    const accuracy = typeof d.val_accuracy === "number" ? " · validation accuracy " + (100 * d.val_accuracy).toFixed(1) + "%" : "";
    summarize("epoch " + d.epoch + " · train loss " + fixed(d.train_loss) + accuracy + speed(d), eta(d));
  } else if (event.kind === "status") {
    curve.status = d.status;
    if (TERMINAL.includes(d.status)) {
      const tail = d.version ? ": version " + d.version : d.error ? ": " + d.error : "";
      summarize([d.status + tail, $("curve-summary").dataset.last].filter((t) => t).join(" · "));
      attempt(() => Promise.all([loadJobs(), loadModels()]));
    } else {
      attempt(loadJobs);
    }
  }
  drawCurve();
}

function fixed(x) {
  return typeof x === "number" ? x.toFixed(4) : "?";
}

function speed(d) {
  return typeof d.images_per_second === "number" ? " · " + d.images_per_second.toFixed(0) + " images/s" : "";
}

function eta(d) {
  return typeof d.eta_seconds === "number" && d.eta_seconds > 0 ? " · " + Math.ceil(d.eta_seconds) + " s left" : "";
}

// Shows `text`, followed by the time left (`eta`) while the job runs. The text is kept
// without the time left: the final status shows it, and an ended job has no time left.
function summarize(text, left) {
  const summary = $("curve-summary");
  const running = !TERMINAL.includes(curve.status);
  if (running) summary.dataset.last = text;
  summary.textContent = text + (running && left ? left : "");
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  return node;
}

// Loss against epochs: axes with labels, batch losses as a thin line, epoch losses as
// lines with dots. `data-points` counts the points drawn.
function drawCurve() {
  const box = $("curve");
  const [width, height, left, right, top, bottom] = [640, 260, 52, 14, 12, 34];
  const all = curve.batch.concat(curve.train, curve.val).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const maxX = Math.max(1, ...all.map(([x]) => x));
  const maxY = Math.max(1e-6, ...all.map(([, y]) => y)) * 1.05;
  const px = (x) => left + (x / maxX) * (width - left - right);
  const py = (y) => top + (1 - y / maxY) * (height - top - bottom);
  const nodes = [];
  for (let i = 0; i <= 4; i++) {
    const y = (maxY * i) / 4;
    nodes.push(svg("line", { x1: left, x2: width - right, y1: py(y), y2: py(y), class: "grid" }));
    nodes.push(svg("text", { x: left - 6, y: py(y) + 4, "text-anchor": "end", class: "tick", text: y.toFixed(2) }));
  }
  const ticks = Math.min(Math.ceil(maxX), 10);
  for (let i = 0; i <= ticks; i++) {
    const x = (maxX * i) / ticks;
    nodes.push(svg("text", { x: px(x), y: height - bottom + 16, "text-anchor": "middle", class: "tick", text: Number.isInteger(x) ? String(x) : x.toFixed(1) }));
  }
  nodes.push(svg("text", { x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle", class: "axis-label", text: "epoch" }));
  nodes.push(svg("line", { x1: left, x2: left, y1: top, y2: height - bottom, class: "axis" }));
  nodes.push(svg("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, class: "axis" }));
  let points = 0;
  for (const [name, series, dots] of [["batch", curve.batch, false], ["train", curve.train, true], ["val", curve.val, true]]) {
    const finite = series.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    points += finite.length;
    const path = finite.map(([x, y]) => px(x).toFixed(1) + "," + py(y).toFixed(1)).join(" ");
    if (finite.length > 1) nodes.push(svg("polyline", { points: path, class: "line " + name }));
    if (dots || finite.length === 1) {
      for (const [x, y] of finite) nodes.push(svg("circle", { cx: px(x), cy: py(y), r: 3.5, class: "dot " + name }));
    }
  }
  if (points === 0) {
    nodes.push(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "tick", text: "no loss yet" }));
  }
  box.replaceChildren(...nodes);
  box.setAttribute("data-points", String(points));
}

// ---- Models, versions and downloads -----------------------------------------------------

let models = [];

async function loadModels() {
  models = await getJson("/api/v1/models");
  const cards = models.map(modelCard);
  $("model-list").replaceChildren(...cards);
  $("model-empty").hidden = cards.length > 0;
  // The zoo's picture models only: a job trains on photos, and mlp takes flat vectors.
  const bases = [["zoo:leafnet", "leafnet (zoo, initial weights)"], ["zoo:resnet", "resnet (zoo, initial weights)"]];
  const registered = models.filter((m) => m.current_version).map((m) => ["model:" + m.name, m.name + " v" + m.current_version + " (current)"]);
  fillSelect($("job-base"), registered.concat(bases), true);
  fillSelect($("predict-model"), registered.map(([value, label]) => [value.slice(6), label]), true);
}

function modelCard(model) {
  const rows = model.versions.slice().reverse().map((version) => {
    const current = version.version === model.current_version;
    const metrics = Object.entries(version.metrics || {})
      .filter(([, v]) => typeof v === "number")
      .map(([k, v]) => k + " " + (Number.isInteger(v) ? v : v.toFixed(3))).join(", ");
    const actions = el("td", { class: "actions" });
    if (!current) actions.append(button("Promote", () => promote(model.name, version.version), { class: "quiet", "aria-label": "Make version " + version.version + " of " + model.name + " current" }));
    for (const [format, label] of [["sprout", ".sprout"], ["onnx", "ONNX"], ["bundle", "bundle"]]) {
      actions.append(button(label, () => download(model.name, version.version, format), { class: "quiet", "aria-label": "Download version " + version.version + " of " + model.name + " as " + label }));
    }
    return el("tr", { "data-version": version.version, class: current ? "current" : null },
      el("th", { scope: "row" }, "v" + version.version, current ? el("span", { class: "badge", text: "current" }) : null),
      el("td", { text: version.job ? "job #" + version.job : "uploaded" }),
      el("td", { class: "small", text: metrics }),
      el("td", { text: bytes(version.bytes) }),
      actions);
  });
  const head = el("div", { class: "head" }, el("h3", { text: model.name }));
  if (model.previous_version) {
    head.append(button("Roll back to v" + model.previous_version, () => rollback(model.name), { class: "quiet" }));
  }
  return el("article", { class: "model", "data-model": model.name }, head,
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["Version", "From", "Metrics", "Size"].map((t) => el("th", { scope: "col", text: t })), el("th", { scope: "col" }, el("span", { class: "sr-only", text: "Actions" })))),
      el("tbody", {}, ...rows))));
}

async function promote(name, version) {
  await attempt(async () => {
    await sendJson("POST", "/api/v1/models/" + encodeURIComponent(name) + "/promote", { version });
    showMessage(name + ": version " + version + " is current.", "ok");
    await loadModels();
  });
}

async function rollback(name) {
  await attempt(async () => {
    const model = await sendJson("POST", "/api/v1/models/" + encodeURIComponent(name) + "/rollback");
    showMessage(name + ": rolled back to version " + model.current_version + ".", "ok");
    await loadModels();
  });
}

// Fetches the file with the token, then saves it through a temporary blob link.
async function download(name, version, format) {
  await attempt(async () => {
    const path = "/api/v1/models/" + encodeURIComponent(name) + "/versions/" + version + "/file?format=" + format;
    const blob = await (await request("GET", path)).blob();
    const url = URL.createObjectURL(blob);
    const extension = { sprout: "sprout", onnx: "onnx", bundle: "bundle" }[format];
    const link = el("a", { href: url, download: name + "-v" + version + "." + extension });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
}

async function uploadModel(event) {
  event.preventDefault();
  const name = $("model-upload-name").value.trim();
  const file = $("model-upload-file").files[0];
  await attempt(async () => {
    const model = await (await request("POST", "/api/v1/models/" + encodeURIComponent(name) + "/versions", file, "application/octet-stream")).json();
    const newest = Math.max(...model.versions.map((v) => v.version));
    showMessage("Uploaded " + name + " version " + newest + ".", "ok");
    $("model-upload-form").reset();
    await loadModels();
  });
}

// ---- Predict ----------------------------------------------------------------------------

let preview = null;

async function predict(event) {
  event.preventDefault();
  const file = $("predict-file").files[0];
  const name = $("predict-model").value;
  if (preview) URL.revokeObjectURL(preview);
  preview = URL.createObjectURL(file);
  $("predict-preview").src = preview;
  $("predict-preview").hidden = false;
  await attempt(async () => {
    const path = "/api/v1/models/" + encodeURIComponent(name) + "/predict?top_k=" + (number("predict-topk") || 3);
    const answer = await (await request("POST", path, file, file.type || "application/octet-stream")).json();
    clearMessage();
    $("predict-result").replaceChildren(...answer.top.map((score) =>
      el("li", {},
        el("span", { class: "class", text: score.class }),
        el("meter", { min: 0, max: 1, value: score.probability, "aria-label": score.class }),
        el("span", { class: "small", text: (100 * score.probability).toFixed(1) + "%" }))));
    $("predict-result").setAttribute("aria-label", answer.model + " version " + answer.version);
  });
}

// ---- Boards -----------------------------------------------------------------------------

// The board API (`GET /api/v1/boards`) may be missing from this service: say so.
async function loadBoards() {
  const status = $("boards-status");
  const table = $("board-table");
  let boards;
  try {
    boards = await getJson("/api/v1/boards");
  } catch (error) {
    table.hidden = true;
    status.textContent = error instanceof ApiError && (error.status === 404 || error.status === 405)
      ? "This service has no board API."
      : "Boards cannot be listed: " + describe(error);
    return;
  }
  const list = Array.isArray(boards) ? boards : boards.boards || [];
  if (list.length === 0) {
    table.hidden = true;
    status.textContent = "No boards registered.";
    return;
  }
  const keys = [...new Set(list.flatMap((board) => Object.keys(board)))];
  const show = (v) => (v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));
  table.tHead.rows[0].replaceChildren(...keys.map((k) => el("th", { scope: "col", text: k })));
  table.tBodies[0].replaceChildren(...list.map((board) => el("tr", {}, ...keys.map((k) => el("td", { text: show(board[k]) })))));
  status.textContent = list.length + " board" + (list.length === 1 ? "" : "s") + ".";
  table.hidden = false;
}

// ---- Start ------------------------------------------------------------------------------

const loaders = { datasets: loadDatasets, jobs: loadJobs, models: loadModels, boards: loadBoards };

async function loadAll() {
  clearMessage();
  const ok = await attempt(async () => {
    // One call first, so a refused token gives one message rather than four.
    await loadDatasets();
    return true;
  });
  const signedIn = ok === true;
  for (const id of ["datasets", "jobs", "models", "predict", "boards"]) $(id).hidden = !signedIn;
  $("welcome").hidden = signedIn;
  if (!signedIn) return;
  await attempt(() => Promise.all([loadJobs(), loadModels()]));
  await loadBoards();
}

function saveToken(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("token").placeholder = "token saved for this tab";
  loadAll();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  if (curve.stop) curve.stop.abort();
  $("token").placeholder = "sprout_…";
  for (const id of ["datasets", "jobs", "models", "predict", "boards"]) $(id).hidden = true;
  $("welcome").hidden = false;
  clearMessage();
}

document.addEventListener("DOMContentLoaded", () => {
  $("token-form").addEventListener("submit", saveToken);
  $("token-forget").addEventListener("click", forgetToken);
  $("dataset-form").addEventListener("submit", createDataset);
  $("upload-dataset").addEventListener("change", fillUploadClasses);
  $("upload-form").addEventListener("submit", upload);
  $("job-form").addEventListener("submit", startJob);
  $("model-upload-form").addEventListener("submit", uploadModel);
  $("predict-form").addEventListener("submit", predict);
  for (const refresh of document.querySelectorAll("[data-refresh]")) {
    refresh.addEventListener("click", () => attempt(loaders[refresh.dataset.refresh]));
  }
  if (token()) {
    $("token").placeholder = "token saved for this tab";
    loadAll();
  }
});

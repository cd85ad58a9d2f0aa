//! Boards around the box: microcontroller boards running sprout's firmware, registered by
//! their port (a serial device or `tcp:HOST:PORT`) with the registry version their
//! firmware's bundle was made from (and how: `sprout bundle`'s options), and the jobs that
//! talk to them through `sprout device` child processes: push a version as a device
//! checkpoint, train on a data set's images (sent once, or streamed every epoch to a board
//! that trains from its input), pull the board's checkpoint back into the registry as a new
//! version.

use std::path::Path;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sprout_core::format::{bundle, device_checkpoint as checkpoint};
use sprout_core::link::{Limits, RetryPolicy};
use sprout_device::{ConnectOptions, Device, PortSpec};
use sprout_train::Model;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::auth::{Access, Admin, Read, Train};
use crate::db::now;
use crate::error::{ApiError, ErrorBody, Json};
use crate::jobs::{self, JobInfo};
use crate::runner::{self, Ended};
use crate::store::{sha256, Staged};
use crate::{datasets, models, names};

/// Baud rate of a serial board registered without one.
const DEFAULT_BAUD: u32 = 115_200;
/// How long the hello at registration may take.
const HELLO_DEADLINE_MS: u32 = 10_000;

/// `POST /api/v1/boards`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewBoard {
    pub name: String,
    /// `tcp:HOST:PORT` or a serial device under `/dev/`.
    pub port: String,
    /// Baud rate of a serial port (default 115200).
    pub baud: Option<u32>,
    /// The registry model whose bundle the board's firmware runs.
    pub model: String,
    /// Its version (default: the current one).
    pub version: Option<u32>,
    /// How the firmware's bundle was made from that version (default: `sprout bundle`'s
    /// defaults, the head-only update).
    #[serde(default)]
    pub bundle_options: BundleOptions,
}

/// `sprout bundle`'s options: what the board trains and how; each absent one is the
/// command's default.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleOptions {
    /// `--trainable`: head, bias, all, or comma-separated name patterns with `*` (e.g. the
    /// stem update's `head,features.0.*.bias,features.1.*.bias,features.2.*.bias`).
    pub trainable: Option<String>,
    /// `--sparse-budget`, in bytes (instead of `trainable`).
    pub sparse_budget: Option<u64>,
    /// `--cache-samples` (with `sparse_budget`).
    pub cache_samples: Option<u64>,
    /// `--batch-size`.
    pub batch_size: Option<u64>,
    /// `--lr`.
    pub lr: Option<f32>,
    /// `--momentum`.
    pub momentum: Option<f32>,
}

impl BundleOptions {
    /// `sprout bundle` with these options, each value joined to its flag (so that no value
    /// reads as a flag).
    fn command(&self) -> Vec<String> {
        let options = [
            ("trainable", self.trainable.clone()),
            ("sparse-budget", self.sparse_budget.map(|n| n.to_string())),
            ("cache-samples", self.cache_samples.map(|n| n.to_string())),
            ("batch-size", self.batch_size.map(|n| n.to_string())),
            ("lr", self.lr.map(|x| x.to_string())),
            ("momentum", self.momentum.map(|x| x.to_string())),
        ];
        let given = options.into_iter().filter_map(|(flag, v)| Some(format!("--{flag}={}", v?)));
        std::iter::once("bundle".to_string()).chain(given).collect()
    }
}

/// A registered board.
#[derive(Serialize, ToSchema)]
pub struct BoardInfo {
    pub name: String,
    pub port: String,
    pub baud: Option<u32>,
    pub model: String,
    pub version: u32,
    /// SHA-256 of the device bundle made from that version (`sprout bundle`).
    pub bundle: String,
    /// The model hash the board announced (and the bundle's), `0x` and 16 hex digits.
    pub model_hash: String,
    /// The board's class names, in label order.
    pub classes: Vec<String>,
    pub sample_width: u32,
    pub sample_height: u32,
    /// The board trains from its input (its bundle's first trained layer is the model's
    /// first, as the stem update's): it stores no sample, and a `train` job streams the
    /// data set's samples every epoch (`sprout device train --stream`).
    pub streams: bool,
    /// Unix seconds.
    pub created: i64,
    /// The board's queued or running jobs, oldest first.
    pub jobs: Vec<i64>,
}

fn default_epochs() -> u16 {
    10
}

/// `POST /api/v1/boards/{name}/train`: a job sending the data set's images (every fifth
/// of each class held out for validation) and training on the board; to a board that
/// trains from its input, the images are streamed every epoch.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainOnBoard {
    pub dataset: String,
    #[serde(default = "default_epochs")]
    pub epochs: u16,
    /// Learning rate of the first epoch (the device's own when absent).
    pub lr: Option<f32>,
    /// Add to the samples already on the board instead of replacing them (not for a board
    /// that trains from its input, which stores none).
    #[serde(default)]
    pub keep_samples: bool,
}

/// `POST /api/v1/boards/{name}/push`: a job sending a version's device checkpoint (the one a
/// pull brought back, or one made from the version's weights) for the board to keep.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushToBoard {
    pub model: String,
    /// Default: the current version, fixed when the job is created.
    pub version: Option<u32>,
}

/// `POST /api/v1/boards/{name}/pull`: a job pulling the board's checkpoint, applying it to
/// the version the board's bundle was made from and registering the result.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PullFromBoard {
    /// The model the new version joins (default: the board's model).
    pub model: Option<String>,
    /// Make the new version current (a model's first version always becomes current).
    #[serde(default)]
    pub promote: bool,
}

/// What a board's job does, as stored and shown in the job's `board_task`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BoardTask {
    Train(TrainOnBoard),
    Push(PushToBoard),
    Pull(PullFromBoard),
}

/// Board `name`, or 404.
fn load(state: &AppState, name: &str) -> Result<BoardInfo, ApiError> {
    let db = state.db.lock();
    let found = db.query_row(
        "SELECT port, baud, model, version, bundle, model_hash, classes, sample_width, \
         sample_height, streams, created FROM boards WHERE name = ?1",
        [name],
        |r| {
            Ok((
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
                (r.get(5)?, r.get::<_, String>(6)?, r.get(7)?, r.get(8)?),
                (r.get(9)?, r.get(10)?),
            ))
        },
    );
    let (
        (port, baud, model, version, bundle),
        (model_hash, classes, sample_width, sample_height),
        (streams, created),
    ) = match found {
        Ok(row) => row,
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            return Err(ApiError::not_found(format!("board '{name}'")))
        }
        Err(other) => return Err(other.into()),
    };
    let jobs = db
        .prepare(
            "SELECT id FROM jobs WHERE board = ?1 AND status IN ('queued', 'running') ORDER BY id",
        )?
        .query_map([name], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(BoardInfo {
        name: name.to_string(),
        port,
        baud,
        model,
        version,
        bundle,
        model_hash,
        classes: serde_json::from_str(&classes).map_err(ApiError::internal)?,
        sample_width,
        sample_height,
        streams,
        created,
        jobs,
    })
}

/// The port a client named, checked: `tcp:HOST:PORT`, or a serial device under `/dev/`
/// (nothing else on the box is opened as a port).
fn port_spec(port: &str, baud: Option<u32>) -> Result<PortSpec, ApiError> {
    let spec = PortSpec::parse(port, baud.unwrap_or(DEFAULT_BAUD));
    match &spec {
        PortSpec::Tcp(address) if !address.contains(':') => {
            Err(ApiError::invalid(format!("port '{port}' is not tcp:HOST:PORT")))
        }
        PortSpec::Tcp(_) if baud.is_some() => {
            Err(ApiError::invalid(format!("baud applies to serial ports, not to {port}")))
        }
        PortSpec::Serial { path, .. }
            if !path.starts_with("/dev/") || path.contains("/../") || path.contains('\0') =>
        {
            Err(ApiError::invalid(format!(
                "port '{port}' is neither tcp:HOST:PORT nor a serial device under /dev/"
            )))
        }
        _ => Ok(spec),
    }
}

/// What a board says about itself.
struct Hello {
    model_hash: u64,
    classes: Vec<String>,
    width: u32,
    height: u32,
    streams: bool,
    /// The length of the checkpoint it holds, if it holds one.
    checkpoint: Option<u32>,
}

/// Says hello to the board on `spec`, or a 502 naming the port when it does not answer as
/// sprout's firmware.
fn hello(spec: PortSpec) -> Result<Hello, ApiError> {
    let port = spec.name();
    let unreachable = |e: sprout_device::LinkError| {
        ApiError::new(StatusCode::BAD_GATEWAY, format!("the board on {port} does not answer: {e}"))
    };
    let options = ConnectOptions {
        policy: RetryPolicy::default(),
        reconnects: 0,
        limits: Limits { deadline_ms: Some(HELLO_DEADLINE_MS), stall_ms: None },
    };
    let mut device = Device::connect(spec, options).map_err(unreachable)?;
    let classes = device.class_names().map_err(unreachable)?;
    let info = device.info();
    Ok(Hello {
        model_hash: info.model_hash,
        classes,
        width: u32::from(info.sample.width),
        height: u32::from(info.sample.height),
        streams: info.streams,
        checkpoint: info.checkpoint.map(|c| c.len),
    })
}

#[utoipa::path(post, path = "/api/v1/boards", tag = "boards", request_body = NewBoard,
    description = "Registers a board: makes the device bundle of the model version with `bundle_options` (as `sprout bundle` does), says hello to the board and checks that it runs that bundle: its model, whether it trains from its input, and the size of the checkpoint it holds, if any.",
    responses((status = 201, body = BoardInfo), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn register(
    _: Access<Admin>,
    State(state): State<AppState>,
    Json(request): Json<NewBoard>,
) -> Result<(StatusCode, axum::Json<BoardInfo>), ApiError> {
    names::check("board", &request.name)?;
    let spec = port_spec(&request.port, request.baud)?;
    if load(&state, &request.name).is_ok() {
        return Err(ApiError::conflict(format!("board '{}' exists already", request.name)));
    }
    let version = models::resolve_version(&state, &request.model, request.version)?;
    let model = state.layout.model(&models::version_hash(&state, &request.model, version)?);
    let command = request.bundle_options.command();
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let bytes = models::convert(&state, &model, &command, "a device bundle").await?;
    let (header, _) = bundle::read_header(&bytes).map_err(ApiError::internal)?;
    let bundle_hash = sha256(&bytes);
    Staged::write(&state.layout.tmp(), "bundle", &bytes)?
        .place(&state.layout.device_file(&bundle_hash, "bundle"))?;
    let board =
        tokio::task::spawn_blocking(move || hello(spec)).await.map_err(ApiError::internal)??;
    let what = format!("version {version} of '{}'", request.model);
    check_firmware(&board, &header, &what).map_err(|why| {
        ApiError::invalid(format!(
            "the board on {} {why}: register it with the version and bundle options its \
             firmware was built from",
            request.port
        ))
    })?;
    let Hello { model_hash, classes, width, height, streams, .. } = board;
    let inserted = state.db.lock().execute(
        "INSERT OR IGNORE INTO boards (name, port, baud, model, version, bundle, model_hash, \
         classes, sample_width, sample_height, streams, created) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        rusqlite::params![
            request.name,
            request.port,
            request.baud,
            request.model,
            version,
            bundle_hash,
            format!("{model_hash:#018x}"),
            serde_json::to_string(&classes).map_err(ApiError::internal)?,
            width,
            height,
            streams,
            now()
        ],
    )?;
    if inserted == 0 {
        return Err(ApiError::conflict(format!("board '{}' exists already", request.name)));
    }
    Ok((StatusCode::CREATED, axum::Json(load(&state, &request.name)?)))
}

/// Why a board that said `board` does not run the bundle `header` (made from `what`), if
/// it does not: another model, another way of training (from its input or from stored
/// samples), or a checkpoint of another size than the bundle's state makes.
fn check_firmware(
    board: &Hello,
    header: &bundle::BundleHeader<'_>,
    what: &str,
) -> Result<(), String> {
    let (runs, bundled) = (board.model_hash, header.model_hash);
    if runs != bundled {
        return Err(format!(
            "runs model {runs:#018x}, but {what} bundles to model {bundled:#018x}"
        ));
    }
    let how = |streams: bool| match streams {
        true => "trains from its input (streamed samples)",
        false => "trains from stored samples",
    };
    if board.streams != header.streams() {
        return Err(format!(
            "{}, but {what} bundled with these options {}",
            how(board.streams),
            how(header.streams())
        ));
    }
    let expected = checkpoint::CHECKPOINT_HEADER_BYTES as u64 + u64::from(header.state.len);
    match board.checkpoint {
        Some(len) if u64::from(len) != expected => Err(format!(
            "holds a {len}-byte checkpoint, but a checkpoint of {what} bundled with these \
             options takes {expected} bytes (it trains other tensors)"
        )),
        _ => Ok(()),
    }
}

#[utoipa::path(get, path = "/api/v1/boards", tag = "boards", responses((status = 200, body = [BoardInfo])))]
pub async fn list(
    _: Access<Read>,
    State(state): State<AppState>,
) -> Result<axum::Json<Vec<BoardInfo>>, ApiError> {
    let names: Vec<String> = {
        let db = state.db.lock();
        let mut statement = db.prepare("SELECT name FROM boards ORDER BY name")?;
        let rows = statement.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    Ok(axum::Json(names.iter().map(|name| load(&state, name)).collect::<Result<_, _>>()?))
}

#[utoipa::path(get, path = "/api/v1/boards/{name}", tag = "boards",
    responses((status = 200, body = BoardInfo), (status = 404, body = ErrorBody)))]
pub async fn get_board(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<axum::Json<BoardInfo>, ApiError> {
    Ok(axum::Json(load(&state, &name)?))
}

#[utoipa::path(delete, path = "/api/v1/boards/{name}", tag = "boards",
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete(
    _: Access<Admin>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<StatusCode, ApiError> {
    let board = load(&state, &name)?;
    if !board.jobs.is_empty() {
        return Err(ApiError::conflict(format!(
            "board '{name}' has job(s) {:?} queued or running: cancel them or wait",
            board.jobs
        )));
    }
    state.db.lock().execute("DELETE FROM boards WHERE name = ?1", [&name])?;
    Ok(StatusCode::NO_CONTENT)
}

/// The board routes, merged into the service's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/boards", get(list).post(register))
        .route("/api/v1/boards/{name}", get(get_board).delete(delete))
        .route("/api/v1/boards/{name}/train", post(train_job))
        .route("/api/v1/boards/{name}/push", post(push_job))
        .route("/api/v1/boards/{name}/pull", post(pull_job))
}

/// Queues `task` as a job of `board` (its `dataset` and `model` columns as given).
fn queue(
    state: &AppState,
    board: &str,
    dataset: &str,
    model: &str,
    task: &BoardTask,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let id = {
        let db = state.db.lock();
        db.execute(
            "INSERT INTO jobs (dataset, model, request, status, estimate_bytes, created, board) \
             VALUES (?1, ?2, ?3, 'queued', 0, ?4, ?5)",
            rusqlite::params![
                dataset,
                model,
                serde_json::to_string(task).map_err(ApiError::internal)?,
                now(),
                board
            ],
        )?;
        db.last_insert_rowid()
    };
    state.hub.record(&state.db, id, "status", json!({"status": "queued"}))?;
    state.runners.wake();
    Ok((StatusCode::CREATED, axum::Json(jobs::load(state, id)?)))
}

#[utoipa::path(post, path = "/api/v1/boards/{name}/train", tag = "boards", request_body = TrainOnBoard,
    description = "Queues a job that sends the data set's images to the board and trains there (`sprout device train`), or, to a board that trains from its input, streams them every epoch (`--stream`); follow it at /api/v1/jobs/{id}/events.",
    responses((status = 201, body = JobInfo), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn train_job(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    Json(request): Json<TrainOnBoard>,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let board = load(&state, &name)?;
    if request.epochs == 0 {
        return Err(ApiError::invalid("epochs must be at least 1"));
    }
    if request.lr.is_some_and(|lr| !(lr.is_finite() && lr > 0.0)) {
        return Err(ApiError::invalid("lr must be a positive number"));
    }
    let dataset = datasets::get_info(&state, &request.dataset)?;
    if let Some(class) = dataset.classes.iter().find(|c| !board.classes.contains(&c.name)) {
        return Err(ApiError::invalid(format!(
            "class '{}' of data set '{}' is not one of board '{name}''s classes ({})",
            class.name,
            request.dataset,
            board.classes.join(", ")
        )));
    }
    if dataset.images == 0 {
        return Err(ApiError::invalid(format!("data set '{}' has no images", request.dataset)));
    }
    if board.streams && request.keep_samples {
        return Err(ApiError::invalid(format!(
            "board '{name}' trains from its input and stores no sample: keep_samples does not \
             apply, every epoch streams the data set's images"
        )));
    }
    let task = BoardTask::Train(request.clone());
    queue(&state, &name, &request.dataset, &board.model, &task)
}

#[utoipa::path(post, path = "/api/v1/boards/{name}/push", tag = "boards", request_body = PushToBoard,
    description = "Queues a job that sends a version to the board as a device checkpoint (`sprout device push`): the one a pull brought back, or else one made from the version's device bundle, which must differ from the board's firmware bundle only in the weights the board trains.",
    responses((status = 201, body = JobInfo), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn push_job(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    Json(mut request): Json<PushToBoard>,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let board = load(&state, &name)?;
    let version = models::resolve_version(&state, &request.model, request.version)?;
    let refused = |why: String| {
        ApiError::invalid(format!(
            "version {version} of '{}' cannot be pushed to board '{name}': {why}",
            request.model
        ))
    };
    let hash = match device_checkpoint(&state, &request.model, version)? {
        Some(hash) => hash,
        None => {
            let path = state.layout.model(&models::version_hash(&state, &request.model, version)?);
            let bundle = models::convert(&state, &path, &["bundle"], "a device bundle")
                .await
                .map_err(|e| refused(e.message))?;
            let firmware =
                tokio::fs::read(state.layout.device_file(&board.bundle, "bundle")).await?;
            let sealed = checkpoint_for_firmware(&bundle, &firmware).map_err(refused)?;
            let hash = sha256(&sealed);
            Staged::write(&state.layout.tmp(), "checkpoint", &sealed)?
                .place(&state.layout.device_file(&hash, "ckpt"))?;
            state.db.lock().execute(
                "UPDATE model_versions SET device_checkpoint = ?3 WHERE model = ?1 AND version = ?2",
                rusqlite::params![request.model, version, hash],
            )?;
            hash
        }
    };
    let path = state.layout.device_file(&hash, "ckpt");
    let bytes = tokio::task::spawn_blocking(move || sprout_device::read_checkpoint_file(&path))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    let (info, _) = checkpoint::read(&bytes).map_err(ApiError::internal)?;
    if format!("{:#018x}", info.model_hash) != board.model_hash {
        return Err(refused(format!(
            "its device checkpoint is of model {:#018x}, the board runs {}",
            info.model_hash, board.model_hash
        )));
    }
    request.version = Some(version);
    let model = request.model.clone();
    queue(&state, &name, "", &model, &BoardTask::Push(request))
}

/// A device checkpoint file (sealed, as `sprout device pull -o` writes one) holding the
/// initial state of `bundle` (a version's device bundle) for a board whose firmware holds
/// the bundle `firmware`, or why the board cannot take it: another graph or other classes,
/// another state size, or other frozen weights (a changed backbone needs new firmware).
fn checkpoint_for_firmware(bundle: &[u8], firmware: &[u8]) -> Result<Vec<u8>, String> {
    let (ours, _) = bundle::read_header(bundle).map_err(|e| format!("its bundle: {e}"))?;
    let (theirs, _) =
        bundle::read_header(firmware).map_err(|e| format!("the board's bundle: {e}"))?;
    let new_firmware =
        "it reaches the board only in new firmware (`sprout bundle`, `sprout flash`)";
    if ours.model_hash != theirs.model_hash {
        return Err(format!(
            "it is model {:#018x} (other layers or shapes), the board's firmware runs model \
             {:#018x}; {new_firmware}",
            ours.model_hash, theirs.model_hash
        ));
    }
    if ours.class_names != theirs.class_names {
        return Err(format!(
            "its classes ({}) are not the board's ({}); {new_firmware}",
            ours.class_names.join(", "),
            theirs.class_names.join(", ")
        ));
    }
    if ours.state.len != theirs.state.len {
        return Err(format!(
            "its trained state is {} bytes, the board's {} bytes; {new_firmware}",
            ours.state.len, theirs.state.len
        ));
    }
    fn section(bytes: &[u8], s: bundle::Section) -> Result<&[u8], String> {
        let start = s.offset as usize;
        let end = start.saturating_add(s.len as usize);
        bytes.get(start..end).ok_or_else(|| "a bundle section lies outside its file".into())
    }
    if section(bundle, ours.frozen)? != section(firmware, theirs.frozen)? {
        return Err(format!(
            "it changes weights the board's firmware holds frozen (its backbone); only \
             versions that differ in the trained head can be pushed, {new_firmware}"
        ));
    }
    let state = section(bundle, ours.state)?;
    let info = checkpoint::CheckpointInfo {
        model_hash: ours.model_hash,
        epoch: 0,
        progress: sprout_core::Progress::default(),
        accuracy: 0.0,
    };
    let mut bytes = vec![0; checkpoint::CHECKPOINT_HEADER_BYTES + state.len()];
    checkpoint::encode(&info, state, &mut bytes).map_err(|e| e.to_string())?;
    checkpoint::seal_file(&bytes).map_err(|e| e.to_string())
}

#[utoipa::path(post, path = "/api/v1/boards/{name}/pull", tag = "boards", request_body = PullFromBoard,
    description = "Queues a job that pulls the board's checkpoint (`sprout device pull`), applies it to the version the board's bundle was made from and registers the result as the next version of `model`.",
    responses((status = 201, body = JobInfo), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn pull_job(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    Json(mut request): Json<PullFromBoard>,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let board = load(&state, &name)?;
    let model = request.model.get_or_insert(board.model).clone();
    names::check("model", &model)?;
    queue(&state, &name, "", &model, &BoardTask::Pull(request))
}

/// The device checkpoint file hash of `model`'s `version`, when a pull made it.
fn device_checkpoint(
    state: &AppState,
    model: &str,
    version: u32,
) -> Result<Option<String>, ApiError> {
    Ok(state.db.lock().query_row(
        "SELECT device_checkpoint FROM model_versions WHERE model = ?1 AND version = ?2",
        rusqlite::params![model, version],
        |r| r.get(0),
    )?)
}

/// `--port PORT [--baud BAUD]` of `board`.
fn port_arguments(board: &BoardInfo) -> Vec<String> {
    let mut args = vec!["--port".to_string(), board.port.clone()];
    if let Some(baud) = board.baud {
        args.extend(["--baud".to_string(), baud.to_string()]);
    }
    args
}

/// Runs board job `id` on `board` (on a runner's thread).
pub fn run(state: &AppState, id: i64, board: &str, task: &BoardTask) -> anyhow::Result<Ended> {
    let board = load(state, board).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let folder = state.layout.job(id);
    std::fs::create_dir_all(&folder)?;
    let path = |p: &Path| p.display().to_string();
    let mut args: Vec<String> = vec!["device".into()];
    match task {
        BoardTask::Train(request) => {
            let data = runner::snapshot(state, id, &request.dataset, true)?;
            args.push("train".into());
            args.extend(port_arguments(&board));
            args.extend(["--data".into(), path(&data), "--epochs".into()]);
            args.push(request.epochs.to_string());
            if let Some(lr) = request.lr {
                args.extend(["--lr".into(), lr.to_string()]);
            }
            if request.keep_samples {
                args.push("--keep-samples".into());
            }
            if board.streams {
                args.push("--stream".into());
            }
            args.push("--progress-json".into());
        }
        BoardTask::Push(request) => {
            let version = request.version.ok_or_else(|| anyhow::anyhow!("unresolved version"))?;
            let hash = device_checkpoint(state, &request.model, version)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?
                .ok_or_else(|| anyhow::anyhow!("the version lost its device checkpoint"))?;
            args.push("push".into());
            args.extend(port_arguments(&board));
            args.push(path(&state.layout.device_file(&hash, "ckpt")));
        }
        BoardTask::Pull(_) => {
            args.push("pull".into());
            args.extend(port_arguments(&board));
            let bundle = state.layout.device_file(&board.bundle, "bundle");
            args.extend(["--bundle".into(), path(&bundle)]);
            args.extend(["-o".into(), path(&folder.join("device.ckpt"))]);
        }
    }
    let Some(output) = runner::run_child(state, id, &args)? else {
        return Ok(Ended::Cancelled);
    };
    for line in output.lines() {
        state.hub.record(&state.db, id, "log", json!({"line": line}))?;
    }
    match task {
        BoardTask::Pull(request) => {
            register_pulled(state, id, &board, request).map(Ended::Succeeded)
        }
        _ => Ok(Ended::Done),
    }
}

/// Applies the checkpoint job `id` pulled from `board` to the version the board's bundle
/// was made from and registers the result (keeping the checkpoint beside it, for pushes).
fn register_pulled(
    state: &AppState,
    id: i64,
    board: &BoardInfo,
    request: &PullFromBoard,
) -> anyhow::Result<u32> {
    let api = |e: ApiError| anyhow::anyhow!("{}", e.message);
    let folder = state.layout.job(id);
    let sealed = std::fs::read(folder.join("device.ckpt"))?;
    let checkpoint = sprout_device::read_checkpoint_file(&folder.join("device.ckpt"))?;
    let base =
        state.layout.model(&models::version_hash(state, &board.model, board.version).map_err(api)?);
    let mut model = Model::open(&base)?;
    let bundle = std::fs::read(state.layout.device_file(&board.bundle, "bundle"))?;
    let info = sprout_bundle::apply_device_checkpoint(&mut model, &bundle, &checkpoint)?;
    let file = sprout_core::ModelFile::from_graph(&model.zoo.graph, model.metadata.clone());
    let bytes = sprout_core::save_model(&file)
        .map_err(|e| anyhow::anyhow!("cannot encode the model: {e}"))?;
    let output = folder.join("model.sprout");
    sprout_train::write_atomic(&output, &bytes)?;
    let checkpoint_hash = sha256(&sealed);
    Staged::write(&state.layout.tmp(), "checkpoint", &sealed)?
        .place(&state.layout.device_file(&checkpoint_hash, "ckpt"))?;
    let metrics = json!({
        "board": board.name,
        "base_version": board.version,
        "device_epoch": info.epoch,
        "device_updates": info.progress.updates,
        "device_accuracy": info.accuracy,
    });
    let model_name = request.model.clone().unwrap_or_else(|| board.model.clone());
    let version =
        models::register(state, &model_name, &output, Some(id), &metrics, request.promote)
            .map_err(api)?;
    state.db.lock().execute(
        "UPDATE model_versions SET device_checkpoint = ?3 WHERE model = ?1 AND version = ?2",
        rusqlite::params![model_name, version, checkpoint_hash],
    )?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::port_spec;

    #[test]
    fn ports_are_tcp_addresses_or_serial_devices() {
        assert!(port_spec("tcp:127.0.0.1:4444", None).is_ok());
        assert!(port_spec("/dev/ttyACM0", Some(9600)).is_ok());
        for bad in ["tcp:localhost", "/etc/passwd", "ttyACM0", "/dev/../etc/shadow"] {
            let error = port_spec(bad, None).err().unwrap();
            assert!(error.message.contains(bad), "{}", error.message);
        }
        assert!(port_spec("tcp:127.0.0.1:4444", Some(9600)).is_err());
    }
}

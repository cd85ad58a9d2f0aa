//! Fine-tuning jobs: created from a base model (a zoo model or a registry version), a data
//! set and `sprout train` options; checked and sized before they are queued (a job whose
//! memory estimate does not fit is refused); listed, inspected and cancelled. The runners
//! (`runner.rs`) take them from the queue in order.

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sprout_data::write_atomic;
use sprout_onnx::read_safetensors;
use sprout_train::{check_gradient_offset, Model, NamedOffset};
use sprout_zoo::Architecture;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::auth::{Access, Read, Train};
use crate::boards::BoardTask;
use crate::db::now;
use crate::error::{ApiError, ErrorBody, Json};
use crate::{datasets, estimate, models, names};

/// What a job starts from.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Base {
    /// A zoo model from its initial weights: `mlp`, `resnet` or `leafnet`.
    Zoo(String),
    /// A registry model's version (without `version`: its current one, fixed when the job
    /// is created).
    Model { name: String, version: Option<u32> },
}

/// The optimizer, as `sprout train --optimizer`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    #[default]
    Sgd,
    Adamw,
}

/// How the learning rate moves over the job, as `sprout train --schedule`: `constant`,
/// `step` (divided by 10 after each third), `cosine` (5 % warm-up, then decay to 0) or
/// `plateau` (halved when validation accuracy stalls for 2 epochs).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    #[default]
    Constant,
    Step,
    Cosine,
    Plateau,
}

/// What the batch norms normalise with while the job trains, as `sprout train --batch-norm`:
/// each batch's statistics (`batch`, the default) or the base's running statistics
/// (`running`), which suits small or one-sided data sets such as a federated box's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BatchNorm {
    #[default]
    Batch,
    Running,
}

/// Where a job trains, as `sprout train --backend`: `auto` (CUDA when the build has it and
/// a GPU is present, else the CPU; the job's log says which) or `cpu`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Auto,
    Cpu,
}

fn default_trainable() -> String {
    "all".into()
}

fn default_epochs() -> u32 {
    5
}

/// `POST /api/v1/jobs`: the options are those of `sprout train`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The data set to train on (split 80/20 per class for validation, by `seed`).
    pub dataset: String,
    pub base: Base,
    /// The registry model the result becomes a version of (default: the data set's name).
    pub model: Option<String>,
    /// Replace the base's classifier with a fresh one for the data set's classes (a
    /// registry base only).
    #[serde(default)]
    pub new_head: bool,
    /// `all`, `head`, `bias` or comma-separated parameter name patterns with `*`.
    #[serde(default = "default_trainable")]
    pub trainable: String,
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Learning rate (default 0.05).
    pub lr: Option<f32>,
    #[serde(default)]
    pub schedule: Schedule,
    #[serde(default = "default_epochs")]
    pub epochs: u32,
    /// FedProx's proximal term: each update also pulls the trainable weights towards the
    /// base's by `lr * proximal_mu * (w - w0)` (`sprout train --proximal-mu`; 0: off).
    #[serde(default)]
    pub proximal_mu: f32,
    /// SCAFFOLD's correction: a safetensors file (base64) of offsets by parameter name, each
    /// a trainable parameter of the base with its shape and finite values; after every
    /// update each named weight also moves by `-lr * offset` (`sprout train
    /// --gradient-offset`). Kept in the job's folder, not in the request the API shows.
    #[serde(default, skip_serializing)]
    pub gradient_offset: Option<String>,
    #[serde(default)]
    pub batch_norm: BatchNorm,
    /// Logit adjustment for label skew: the training loss reads `logits + logit_adjust *
    /// ln(prior)`, the prior being the training split's class frequencies (`sprout train
    /// --logit-adjust`; 0: off).
    #[serde(default)]
    pub logit_adjust: f32,
    /// Samples per step (default 16 for a zoo model, else the batch the file records).
    pub batch_size: Option<u32>,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub backend: Backend,
    /// Make the new version current when the job succeeds (a model's first version always
    /// becomes current).
    #[serde(default)]
    pub promote: bool,
}

/// A job as the API shows it: a fine-tuning job (`request`) or a board's (`board`,
/// `board_task`; its `dataset` is empty unless it trains).
#[derive(Serialize, ToSchema)]
pub struct JobInfo {
    pub id: i64,
    pub dataset: String,
    pub model: String,
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    pub error: Option<String>,
    /// Memory the job was estimated to need, in bytes.
    pub estimate_bytes: u64,
    /// The model version the job registered.
    pub version: Option<u32>,
    /// What a fine-tuning job was asked (null for a board's job).
    pub request: Option<JobRequest>,
    /// The board a board's job talks to (null for a fine-tuning job).
    pub board: Option<String>,
    /// What a board's job does.
    pub board_task: Option<BoardTask>,
    /// Unix seconds.
    pub created: i64,
    pub started: Option<i64>,
    pub finished: Option<i64>,
    /// The data of the job's newest `progress` or `epoch` event (null before the first).
    /// Its `eta_seconds` is null unless the job is running: a finished, failed, cancelled
    /// or re-queued job has no time left to show.
    #[schema(value_type = Option<Object>)]
    pub progress: Option<serde_json::Value>,
}

/// Whether a job in `status` is over.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

/// Job `id`, or 404.
pub fn load(state: &AppState, id: i64) -> Result<JobInfo, ApiError> {
    let found = state.db.lock().query_row(
        "SELECT id, dataset, model, status, error, estimate_bytes, version, request, created, started, finished, board \
         FROM jobs WHERE id = ?1",
        [id],
        |r| {
            Ok((
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?),
                (r.get::<_, String>(7)?, r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?),
            ))
        },
    );
    let (
        (id, dataset, model, status, error, estimate_bytes, version),
        (request, created, started, finished, board),
    ) = match found {
        Ok(row) => row,
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            return Err(ApiError::not_found(format!("job {id}")))
        }
        Err(other) => return Err(other.into()),
    };
    let (request, board_task) = match board {
        None => (Some(serde_json::from_str(&request).map_err(ApiError::internal)?), None),
        Some(_) => (None, Some(serde_json::from_str(&request).map_err(ApiError::internal)?)),
    };
    let progress = latest_progress(state, id, String::as_str(&status))?;
    Ok(JobInfo {
        id,
        dataset,
        model,
        status,
        error,
        estimate_bytes,
        version,
        request,
        board,
        board_task,
        created,
        started,
        finished,
        progress,
    })
}

/// The data of job `id`'s newest `progress` or `epoch` event, its ETA kept only while the
/// job's `status` is `running`.
fn latest_progress(
    state: &AppState,
    id: i64,
    status: &str,
) -> Result<Option<serde_json::Value>, ApiError> {
    let found = state.db.lock().query_row(
        "SELECT data FROM job_events WHERE job_id = ?1 AND kind IN ('progress', 'epoch') \
         ORDER BY id DESC LIMIT 1",
        [id],
        |r| r.get::<_, String>(0),
    );
    let data = match found {
        Ok(data) => data,
        Err(rusqlite::Error::QueryReturnedNoRows) => return Ok(None),
        Err(other) => return Err(other.into()),
    };
    let mut data: serde_json::Value = serde_json::from_str(&data).map_err(ApiError::internal)?;
    if let Some(eta) = data.get_mut("eta_seconds").filter(|_| status != "running") {
        *eta = serde_json::Value::Null;
    }
    Ok(Some(data))
}

/// Builds the model a job trains, as `sprout train` would, and checks it against the data
/// set's classes; returns its memory estimate.
fn plan_job(
    state: &AppState,
    request: &JobRequest,
    classes: &[String],
    images: u64,
    offset: &[NamedOffset],
) -> Result<u64, ApiError> {
    let batch = request.batch_size.map(|b| b as usize);
    let mut model = match &request.base {
        Base::Zoo(name) => {
            let arch = Architecture::from_name(name).ok_or_else(|| {
                ApiError::invalid(format!("unknown zoo model '{name}' (mlp, resnet or leafnet)"))
            })?;
            Model::from_zoo_for(arch, batch.unwrap_or(16), classes.len(), request.seed)
                .map_err(|e| ApiError::invalid(e.to_string()))?
        }
        Base::Model { name, version } => {
            let version = version.ok_or_else(|| ApiError::internal("unresolved base version"))?;
            let path = state.layout.model(&models::version_hash(state, name, version)?);
            let model = Model::open(&path).map_err(ApiError::internal)?;
            match batch {
                Some(batch) => {
                    model.with_batch(batch).map_err(|e| ApiError::invalid(e.to_string()))?
                }
                None => model,
            }
        }
    };
    if model.image_size().is_none() {
        let dims = model.sample_dims();
        return Err(ApiError::invalid(format!(
            "the base model takes samples of shape {dims:?}, not square RGB pictures"
        )));
    }
    if request.new_head {
        model
            .new_head(classes.len(), request.seed)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    let origin = std::path::Path::new(&request.dataset);
    model
        .adopt_classes(classes, origin)
        .map_err(|e| ApiError::invalid(format!("base model and data set disagree: {e}")))?;
    if !offset.is_empty() {
        let trainable = sprout_zoo::select_trainable(&model.zoo, &request.trainable)
            .map_err(|e| ApiError::invalid(format!("trainable '{}': {e}", request.trainable)))?;
        check_gradient_offset(&model.zoo.graph, &trainable, offset)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    estimate::training_bytes(
        &model,
        &request.trainable,
        request.optimizer == Optimizer::Adamw,
        images,
    )
    .map_err(|e| ApiError::invalid(format!("trainable '{}': {e}", request.trainable)))
}

/// The file in a job's folder holding its `gradient_offset` (safetensors).
pub const GRADIENT_OFFSET_FILE: &str = "gradient-offset.safetensors";

/// The request's `gradient_offset` decoded from base64 (a 422 when it is not base64, or
/// given with a zoo base: offsets name a registry model's parameters).
fn gradient_offset_bytes(request: &JobRequest) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(text) = &request.gradient_offset else { return Ok(None) };
    if matches!(request.base, Base::Zoo(_)) {
        return Err(ApiError::invalid(
            "gradient_offset names a registry model's parameters; the base is a zoo model",
        ));
    }
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| ApiError::invalid(format!("gradient_offset is not base64: {e}")))?;
    Ok(Some(bytes))
}

/// 422 when a job needing `bytes` does not fit next to the jobs running now.
fn check_memory(state: &AppState, bytes: u64) -> Result<(), ApiError> {
    let (limit, what) = match state.memory_limit {
        Some(limit) => {
            let running: u64 = state.db.lock().query_row(
                "SELECT COALESCE(SUM(estimate_bytes), 0) FROM jobs WHERE status = 'running'",
                [],
                |r| r.get(0),
            )?;
            (limit.saturating_sub(running), "left of --memory-limit next to the running jobs")
        }
        None => match estimate::available_bytes() {
            Some(available) => (available, "available on this machine"),
            None => return Ok(()),
        },
    };
    if bytes > limit {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        return Err(ApiError::invalid(format!(
            "the job needs about {:.1} MiB (plan, optimizer state, cached images, process) but \
             only {:.1} MiB are {what}: train fewer layers, use a smaller batch or model",
            mib(bytes),
            mib(limit)
        )));
    }
    Ok(())
}

#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", request_body = JobRequest,
    responses((status = 201, body = JobInfo), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    _: Access<Train>,
    State(state): State<AppState>,
    Json(mut request): Json<JobRequest>,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let model_name = request.model.clone().unwrap_or_else(|| request.dataset.clone());
    names::check("model", &model_name)?;
    if request.epochs == 0 || request.epochs > 10_000 {
        return Err(ApiError::invalid("epochs must be 1 to 10000"));
    }
    if request.batch_size == Some(0) {
        return Err(ApiError::invalid("batch_size must be at least 1"));
    }
    if request.lr.is_some_and(|lr| !(lr.is_finite() && lr > 0.0)) {
        return Err(ApiError::invalid("lr must be a positive number"));
    }
    if !(request.proximal_mu.is_finite() && request.proximal_mu >= 0.0) {
        return Err(ApiError::invalid("proximal_mu must be a number of 0 or more"));
    }
    if !(request.logit_adjust.is_finite() && request.logit_adjust >= 0.0) {
        return Err(ApiError::invalid("logit_adjust must be a number of 0 or more"));
    }
    let dataset = datasets::get_info(&state, &request.dataset)?;
    if let Some(empty) = dataset.classes.iter().find(|c| c.images == 0) {
        return Err(ApiError::invalid(format!(
            "class '{}' of data set '{}' has no images: upload some first",
            empty.name, request.dataset
        )));
    }
    if let Base::Model { name, version } = &mut request.base {
        *version = Some(models::resolve_version(&state, name, *version)?);
    } else if request.new_head {
        return Err(ApiError::invalid("new_head replaces a registry model's classifier; a zoo model gets one for the data set's classes anyway"));
    }
    let offset_bytes = gradient_offset_bytes(&request)?;
    let classes: Vec<String> = dataset.classes.iter().map(|c| c.name.clone()).collect();
    let planned = {
        let (state, request, bytes) = (state.clone(), request.clone(), offset_bytes.clone());
        tokio::task::spawn_blocking(move || {
            let offset = match &bytes {
                Some(bytes) => read_safetensors(bytes).map_err(|e| {
                    ApiError::invalid(format!("gradient_offset cannot be read: {e}"))
                })?,
                None => Vec::new(),
            };
            plan_job(&state, &request, &classes, dataset.images, &offset)
        })
    };
    let bytes = planned.await.map_err(ApiError::internal)??;
    check_memory(&state, bytes)?;
    let id = {
        let db = state.db.lock();
        db.execute(
            "INSERT INTO jobs (dataset, model, request, status, estimate_bytes, created) VALUES (?1, ?2, ?3, 'queued', ?4, ?5)",
            rusqlite::params![request.dataset, model_name, serde_json::to_string(&request).map_err(ApiError::internal)?, bytes, now()],
        )?;
        let id = db.last_insert_rowid();
        // Written while the database is locked: no runner claims the job before its file is
        // in place.
        if let Some(offset) = &offset_bytes {
            let folder = state.layout.job(id);
            std::fs::create_dir_all(&folder)
                .and_then(|()| write_atomic(&folder.join(GRADIENT_OFFSET_FILE), offset))
                .map_err(|e| ApiError::internal(format!("job {id}'s gradient offset: {e}")))?;
        }
        id
    };
    state.hub.record(&state.db, id, "status", serde_json::json!({"status": "queued"}))?;
    state.runners.wake();
    Ok((StatusCode::CREATED, axum::Json(load(&state, id)?)))
}

#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", responses((status = 200, body = [JobInfo])))]
pub async fn list(
    _: Access<Read>,
    State(state): State<AppState>,
) -> Result<axum::Json<Vec<JobInfo>>, ApiError> {
    let ids: Vec<i64> = {
        let db = state.db.lock();
        let mut statement = db.prepare("SELECT id FROM jobs ORDER BY id")?;
        let rows = statement.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    Ok(axum::Json(ids.into_iter().map(|id| load(&state, id)).collect::<Result<_, _>>()?))
}

#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    responses((status = 200, body = JobInfo), (status = 404, body = ErrorBody)))]
pub async fn get(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(id): UrlPath<i64>,
) -> Result<axum::Json<JobInfo>, ApiError> {
    Ok(axum::Json(load(&state, id)?))
}

#[utoipa::path(post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    description = "A queued job is cancelled at once; a running one's process is killed (its memory freed) and the job becomes `cancelled` when it has exited.",
    responses((status = 202, body = JobInfo), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(id): UrlPath<i64>,
) -> Result<(StatusCode, axum::Json<JobInfo>), ApiError> {
    let job = load(&state, id)?;
    if is_terminal(&job.status) {
        return Err(ApiError::conflict(format!("job {id} is {} already", job.status)));
    }
    let dequeued = state.db.lock().execute(
        "UPDATE jobs SET status = 'cancelled', finished = ?2 WHERE id = ?1 AND status = 'queued'",
        rusqlite::params![id, now()],
    )?;
    if dequeued == 1 {
        state.hub.record(&state.db, id, "status", serde_json::json!({"status": "cancelled"}))?;
    } else {
        state.runners.cancel(id);
    }
    Ok((StatusCode::ACCEPTED, axum::Json(load(&state, id)?)))
}

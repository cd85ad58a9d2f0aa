//! The model registry: models with numbered versions (each a `.sprout` file stored by hash,
//! with its classes, the job that made it and its metrics), a current version that can be
//! promoted or rolled back, uploads of base models, deletion of versions nothing needs, and
//! downloads as `.sprout` or ONNX.

use std::path::Path;

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use rusqlite::OptionalExtension;

use crate::api::AppState;
use crate::auth::{Access, Read, Train};
use crate::boards::BoardTask;
use crate::db::now;
use crate::error::{ApiError, ErrorBody, Json};
use crate::jobs::{Base, JobRequest};
use crate::names;
use crate::store::{sha256, Staged};

/// One version of a model.
#[derive(Serialize, ToSchema)]
pub struct VersionInfo {
    pub version: u32,
    /// SHA-256 of the `.sprout` file.
    pub hash: String,
    pub classes: Vec<String>,
    /// The job that trained it (none for an uploaded model).
    pub job: Option<i64>,
    /// What the job measured: best_accuracy, final_accuracy, final_loss, epochs_run,
    /// samples, seconds.
    #[schema(value_type = Object)]
    pub metrics: serde_json::Value,
    pub bytes: u64,
    /// Unix seconds.
    pub created: i64,
}

/// A model with its versions.
#[derive(Serialize, ToSchema)]
pub struct ModelInfo {
    pub name: String,
    /// The version predictions use.
    pub current_version: Option<u32>,
    /// The version `rollback` returns to.
    pub previous_version: Option<u32>,
    pub versions: Vec<VersionInfo>,
}

/// `POST /api/v1/models/{name}/promote`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Promote {
    pub version: u32,
}

/// The format of a download.
#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Sprout,
    Onnx,
    /// The device bundle `sprout bundle` makes (head training on the device, batch 8).
    Bundle,
    /// The parameters and buffers under their names (see `params.rs`).
    Safetensors,
}

/// `?format=` of a download.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct Download {
    /// `sprout` (default), `onnx`, `bundle` or `safetensors`.
    #[serde(default)]
    pub format: Format,
    /// With `safetensors`: only the parameters this `--trainable` choice selects (e.g.
    /// `head`) and the buffers (batch-norm running statistics): what a job with it changes.
    pub trainable: Option<String>,
}

/// 404 for model `name`'s missing `version`.
fn no_version(name: &str, version: u32) -> ApiError {
    ApiError::not_found(format!("version {version} of model '{name}'"))
}

/// The file hash of `name`'s `version`.
pub fn version_hash(state: &AppState, name: &str, version: u32) -> Result<String, ApiError> {
    let found = state.db.lock().query_row(
        "SELECT hash FROM model_versions WHERE model = ?1 AND version = ?2",
        rusqlite::params![name, version],
        |r| r.get(0),
    );
    match found {
        Ok(hash) => Ok(hash),
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(no_version(name, version)),
        Err(other) => Err(other.into()),
    }
}

/// `version` of model `name` when it exists, else (`None`) its current version.
pub fn resolve_version(
    state: &AppState,
    name: &str,
    version: Option<u32>,
) -> Result<u32, ApiError> {
    let current: Option<u32> = match state.db.lock().query_row(
        "SELECT current_version FROM models WHERE name = ?1",
        [name],
        |r| r.get(0),
    ) {
        Ok(current) => current,
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            return Err(ApiError::not_found(format!("model '{name}'")))
        }
        Err(other) => return Err(other.into()),
    };
    match version {
        Some(version) => version_hash(state, name, version).map(|_| version),
        None => current
            .ok_or_else(|| ApiError::conflict(format!("model '{name}' has no current version"))),
    }
}

/// Stores the model file at `path` as the next version of `name` (created if new), made by
/// `job` with `metrics`; it becomes current when it is the first or `promote` says so.
pub fn register(
    state: &AppState,
    name: &str,
    path: &Path,
    job: Option<i64>,
    metrics: &serde_json::Value,
    promote: bool,
) -> Result<u32, ApiError> {
    let bytes =
        std::fs::read(path).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
    register_bytes(state, name, &bytes, job, metrics, promote)
}

/// [`register`] for bytes in memory, which must be a `.sprout` model (422 otherwise).
pub fn register_bytes(
    state: &AppState,
    name: &str,
    bytes: &[u8],
    job: Option<i64>,
    metrics: &serde_json::Value,
    promote: bool,
) -> Result<u32, ApiError> {
    let model = sprout_train::Model::from_bytes(bytes, Path::new(name))
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let classes = serde_json::to_string(&model.metadata.class_names).map_err(ApiError::internal)?;
    let hash = sha256(bytes);
    let staged = Staged::write(&state.layout.tmp(), "model", bytes)?;
    let mut db = state.db.lock();
    // Placed under the lock: a deletion (which removes a file no version names) cannot
    // remove it between here and the insert.
    staged.place(&state.layout.model(&hash))?;
    let transaction = db.transaction()?;
    transaction.execute(
        "INSERT OR IGNORE INTO models (name, created) VALUES (?1, ?2)",
        rusqlite::params![name, now()],
    )?;
    // Numbers are never reused, also after the highest version was deleted.
    let version: u32 = transaction.query_row(
        "UPDATE models SET last_version = last_version + 1 WHERE name = ?1 RETURNING last_version",
        [name],
        |r| r.get(0),
    )?;
    transaction.execute(
        "INSERT INTO model_versions (model, version, hash, classes, job_id, metrics, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        rusqlite::params![name, version, hash, classes, job, metrics.to_string(), now()],
    )?;
    transaction.execute(
        "UPDATE models SET previous_version = current_version, current_version = ?2 \
         WHERE name = ?1 AND (current_version IS NULL OR ?3)",
        rusqlite::params![name, version, promote],
    )?;
    transaction.commit()?;
    Ok(version)
}

fn model_info(state: &AppState, name: &str) -> Result<ModelInfo, ApiError> {
    let db = state.db.lock();
    let found = db.query_row(
        "SELECT current_version, previous_version FROM models WHERE name = ?1",
        [name],
        |r| Ok((r.get(0)?, r.get(1)?)),
    );
    let (current_version, previous_version) = match found {
        Ok(row) => row,
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            return Err(ApiError::not_found(format!("model '{name}'")))
        }
        Err(other) => return Err(other.into()),
    };
    let mut statement = db.prepare(
        "SELECT version, hash, classes, job_id, metrics, created FROM model_versions WHERE model = ?1 ORDER BY version",
    )?;
    let rows = statement.query_map([name], |r| {
        Ok((
            r.get::<_, u32>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get(3)?,
            r.get::<_, String>(4)?,
            r.get(5)?,
        ))
    })?;
    let mut versions = Vec::new();
    for row in rows {
        let (version, hash, classes, job, metrics, created) = row?;
        let bytes = std::fs::metadata(state.layout.model(&hash)).map(|m| m.len()).unwrap_or(0);
        versions.push(VersionInfo {
            version,
            classes: serde_json::from_str(&classes).map_err(ApiError::internal)?,
            metrics: serde_json::from_str(&metrics).map_err(ApiError::internal)?,
            hash,
            job,
            bytes,
            created,
        });
    }
    Ok(ModelInfo { name: name.to_string(), current_version, previous_version, versions })
}

#[utoipa::path(get, path = "/api/v1/models", tag = "models", responses((status = 200, body = [ModelInfo])))]
pub async fn list(
    _: Access<Read>,
    State(state): State<AppState>,
) -> Result<axum::Json<Vec<ModelInfo>>, ApiError> {
    let names: Vec<String> = {
        let db = state.db.lock();
        let mut statement = db.prepare("SELECT name FROM models ORDER BY name")?;
        let rows = statement.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    Ok(axum::Json(names.iter().map(|n| model_info(&state, n)).collect::<Result<_, _>>()?))
}

#[utoipa::path(get, path = "/api/v1/models/{name}", tag = "models",
    responses((status = 200, body = ModelInfo), (status = 404, body = ErrorBody)))]
pub async fn get(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<axum::Json<ModelInfo>, ApiError> {
    Ok(axum::Json(model_info(&state, &name)?))
}

#[utoipa::path(post, path = "/api/v1/models/{name}/versions", tag = "models",
    description = "Uploads a .sprout model (the request body) as the next version, e.g. a pretrained base to fine-tune.",
    request_body(content_type = "application/octet-stream", content = Vec<u8>),
    responses((status = 201, body = ModelInfo), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn upload(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    bytes: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(StatusCode, axum::Json<ModelInfo>), ApiError> {
    names::check("model", &name)?;
    let bytes = bytes?;
    let (state2, name2) = (state.clone(), name.clone());
    tokio::task::spawn_blocking(move || {
        register_bytes(&state2, &name2, &bytes, None, &serde_json::json!({}), false)
    })
    .await
    .map_err(ApiError::internal)??;
    Ok((StatusCode::CREATED, axum::Json(model_info(&state, &name)?)))
}

#[utoipa::path(post, path = "/api/v1/models/{name}/promote", tag = "models", request_body = Promote,
    responses((status = 200, body = ModelInfo), (status = 404, body = ErrorBody)))]
pub async fn promote(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    Json(request): Json<Promote>,
) -> Result<axum::Json<ModelInfo>, ApiError> {
    resolve_version(&state, &name, Some(request.version))?;
    state.db.lock().execute(
        "UPDATE models SET previous_version = current_version, current_version = ?2 WHERE name = ?1 AND current_version IS NOT ?2",
        rusqlite::params![name, request.version],
    )?;
    Ok(axum::Json(model_info(&state, &name)?))
}

#[utoipa::path(post, path = "/api/v1/models/{name}/rollback", tag = "models",
    description = "Makes the previous current version current again (and the current one previous).",
    responses((status = 200, body = ModelInfo), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn rollback(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<axum::Json<ModelInfo>, ApiError> {
    let info = model_info(&state, &name)?;
    if info.previous_version.is_none() {
        return Err(ApiError::conflict(format!(
            "model '{name}' has no previous version to roll back to"
        )));
    }
    state.db.lock().execute(
        "UPDATE models SET current_version = previous_version, previous_version = current_version WHERE name = ?1",
        [&name],
    )?;
    Ok(axum::Json(model_info(&state, &name)?))
}

/// Why `name`'s `version` must stay, if it must: predictions use it, rollback returns to
/// it, a board's firmware was made from it, or a job not yet ended starts from it or
/// pushes it.
fn needed(db: &rusqlite::Connection, name: &str, version: u32) -> Result<Option<String>, ApiError> {
    let (current, previous): (Option<u32>, Option<u32>) = db.query_row(
        "SELECT current_version, previous_version FROM models WHERE name = ?1",
        [name],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if current == Some(version) {
        return Ok(Some("the current version (promote another first)".into()));
    }
    if previous == Some(version) {
        return Ok(Some("the version rollback returns to".into()));
    }
    let board: Option<String> = db
        .query_row(
            "SELECT name FROM boards WHERE model = ?1 AND version = ?2 LIMIT 1",
            rusqlite::params![name, version],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(board) = board {
        return Ok(Some(format!("the version board '{board}' runs")));
    }
    let mut statement = db.prepare(
        "SELECT id, request, board IS NOT NULL FROM jobs WHERE status IN ('queued', 'running')",
    )?;
    let rows = statement
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get(2)?)))?;
    for row in rows {
        let (id, request, on_board): (i64, String, bool) = row?;
        let stored = |e: serde_json::Error| ApiError::internal(format!("job {id}'s request: {e}"));
        let (model, uses) = if on_board {
            match serde_json::from_str::<BoardTask>(&request).map_err(stored)? {
                BoardTask::Push(push) => (push.model, push.version),
                _ => continue,
            }
        } else {
            match serde_json::from_str::<JobRequest>(&request).map_err(stored)?.base {
                Base::Model { name: model, version: uses } => (model, uses),
                Base::Zoo(_) => continue,
            }
        };
        if model == name && uses == Some(version) {
            return Ok(Some(format!("used by job {id}, which has not ended")));
        }
    }
    Ok(None)
}

/// Deletes `name`'s `version` unless [`needed`]; its file goes too when no other version
/// (of any model) has the same bytes.
fn delete_version_blocking(state: &AppState, name: &str, version: u32) -> Result<(), ApiError> {
    let hash = version_hash(state, name, version)?;
    let mut db = state.db.lock();
    if let Some(why) = needed(&db, name, version)? {
        return Err(ApiError::conflict(format!(
            "version {version} of model '{name}' is {why}: it cannot be deleted"
        )));
    }
    let transaction = db.transaction()?;
    transaction.execute(
        "DELETE FROM model_versions WHERE model = ?1 AND version = ?2",
        rusqlite::params![name, version],
    )?;
    let sharing: i64 = transaction.query_row(
        "SELECT COUNT(*) FROM model_versions WHERE hash = ?1",
        [&hash],
        |r| r.get(0),
    )?;
    transaction.commit()?;
    if sharing == 0 {
        // Still under the lock, so no registration of the same bytes is under way.
        let path = state.layout.model(&hash);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(ApiError::internal(format!("{}: {e}", path.display())));
            }
        }
    }
    Ok(())
}

#[utoipa::path(delete, path = "/api/v1/models/{name}/versions/{version}", tag = "models",
    description = "Deletes a version (e.g. a federated round's intermediate one) so that the registry stays bounded; its `.sprout` file goes when no other version has the same bytes. Its number is not given to another version. 409 for the current version, the one rollback returns to, one a board runs, or one a queued or running job starts from or pushes.",
    responses((status = 200, body = ModelInfo), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete_version(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath((name, version)): UrlPath<(String, u32)>,
) -> Result<axum::Json<ModelInfo>, ApiError> {
    names::check("model", &name)?;
    let (state2, name2) = (state.clone(), name.clone());
    tokio::task::spawn_blocking(move || delete_version_blocking(&state2, &name2, version))
        .await
        .map_err(ApiError::internal)??;
    Ok(axum::Json(model_info(&state, &name)?))
}

#[utoipa::path(get, path = "/api/v1/models/{name}/versions/{version}/file", tag = "models", params(Download),
    description = "The version's .sprout file, its ONNX export, a device bundle of it, or its weights as safetensors (optionally only what a job training the `trainable` selection changes: those parameters and the batch-norm running statistics).",
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>), (status = 404, body = ErrorBody)))]
pub async fn download(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath((name, version)): UrlPath<(String, u32)>,
    query: Result<Query<Download>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if query.trainable.is_some() && query.format != Format::Safetensors {
        return Err(ApiError::invalid("trainable selects weights of format=safetensors only"));
    }
    let path = state.layout.model(&version_hash(&state, &name, version)?);
    let (bytes, extension) = match query.format {
        Format::Sprout => (tokio::fs::read(&path).await?, "sprout"),
        Format::Onnx => {
            (convert(&state, &path, &["export", "--format", "onnx"], "ONNX").await?, "onnx")
        }
        Format::Bundle => (convert(&state, &path, &["bundle"], "a device bundle").await?, "bundle"),
        Format::Safetensors => {
            let trainable = query.trainable.clone();
            let export = move || crate::params::safetensors(&path, trainable.as_deref());
            (tokio::task::spawn_blocking(export).await.map_err(ApiError::internal)??, "safetensors")
        }
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}-v{version}.{extension}\""),
        )
        .body(Body::from(bytes))
        .map_err(ApiError::internal)
}

/// The model at `path` converted by `sprout COMMAND... MODEL -o FILE` (`export` or
/// `bundle`) into a file in `tmp/`; `what` names the result in errors.
pub async fn convert(
    state: &AppState,
    path: &Path,
    command: &[&str],
    what: &str,
) -> Result<Vec<u8>, ApiError> {
    let staged = Staged::write(&state.layout.tmp(), "export", b"")?;
    let output = tokio::process::Command::new(&state.sprout)
        .args(command)
        .arg(path)
        .arg("-o")
        .arg(&staged.path)
        .output()
        .await?;
    if !output.status.success() {
        return Err(ApiError::invalid(format!(
            "this model cannot be made into {what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(tokio::fs::read(&staged.path).await?)
}

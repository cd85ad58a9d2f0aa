//! Model weights over HTTP, what federated fine-tuning needs: a version's parameters as
//! safetensors under their names (all, or a `trainable` selection), safetensors weights
//! applied onto a version to register the next one, and a version (with given weights, if
//! any) evaluated on a data set inside the service, without a job.

use std::path::{Path, PathBuf};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sprout_core::Role;
use sprout_onnx::{
    apply_state_dict, graph_weights, read_safetensors, state_dict, with_weights, NamedTensor,
};
use sprout_train::{open_eval_data, Inference, Model, Pipeline, INFERENCE_BATCH};
use utoipa::{IntoParams, ToSchema};

use crate::api::AppState;
use crate::auth::{Access, Read, Train};
use crate::error::{ApiError, ErrorBody};
use crate::{models, names, runner};

/// 422 for weights that cannot be read or applied (the error names the tensor).
fn bad_weights(error: sprout_onnx::OnnxError) -> ApiError {
    ApiError::invalid(format!("the weights cannot be applied: {error}"))
}

/// The `.sprout` file of `name`'s `version` and its bytes.
fn version_file(
    state: &AppState,
    name: &str,
    version: u32,
) -> Result<(PathBuf, Vec<u8>), ApiError> {
    let path = state.layout.model(&models::version_hash(state, name, version)?);
    let bytes =
        std::fs::read(&path).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
    Ok((path, bytes))
}

/// The tensors of the weights in `body`, none for an empty body.
fn body_tensors(body: &[u8]) -> Result<Vec<NamedTensor>, ApiError> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    read_safetensors(body).map_err(bad_weights)
}

/// The parameters and buffers of the model file at `path` as a safetensors file; with
/// `trainable` (`sprout train --trainable` syntax, e.g. `head`) only what a fine-tuning job
/// with that choice changes: the parameters it selects and the buffers (batch-norm running
/// statistics, which every training step updates, frozen layers' included).
pub fn safetensors(path: &Path, trainable: Option<&str>) -> Result<Vec<u8>, ApiError> {
    let model = Model::open(path).map_err(ApiError::internal)?;
    let graph = &model.zoo.graph;
    let mut tensors = state_dict(graph, &graph_weights(graph)).map_err(ApiError::internal)?;
    if let Some(choice) = trainable {
        let selected = sprout_zoo::select_trainable(&model.zoo, choice)
            .map_err(|e| ApiError::invalid(format!("trainable '{choice}': {e}")))?;
        let names: Vec<&str> = selected
            .iter()
            .map(|&id| graph.tensor(id))
            .chain(graph.tensors().iter().filter(|t| t.role == Role::Buffer))
            .map(|t| t.name.as_str())
            .collect();
        tensors.retain(|(name, _, _)| names.contains(&name.as_str()));
    }
    sprout_onnx::export_safetensors(&tensors).map_err(ApiError::internal)
}

/// `?promote=` of a weights upload.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ApplyQuery {
    /// Make the new version current.
    #[serde(default)]
    pub promote: bool,
}

/// The version weights were applied to make.
#[derive(Serialize, ToSchema)]
pub struct WeightsApplied {
    pub model: String,
    /// The version the weights were applied onto.
    pub base_version: u32,
    /// The new version.
    pub version: u32,
    /// How many tensors the upload replaced.
    pub tensors: usize,
}

/// `version`'s model file with `body`'s tensors applied, as `.sprout` bytes.
fn applied(
    state: &AppState,
    name: &str,
    version: u32,
    body: &[u8],
) -> Result<(Vec<u8>, usize), ApiError> {
    let (path, bytes) = version_file(state, name, version)?;
    let tensors = body_tensors(body)?;
    if tensors.is_empty() {
        return Err(ApiError::invalid("the body holds no tensors: send a safetensors file"));
    }
    let file = sprout_core::load_model(&bytes)
        .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
    let (updated, count) = with_weights(&file, &tensors).map_err(bad_weights)?;
    let out = sprout_core::save_model(&updated).map_err(ApiError::internal)?;
    Ok((out, count))
}

#[utoipa::path(post, path = "/api/v1/models/{name}/versions/{version}/weights", tag = "models", params(ApplyQuery),
    description = "Applies the safetensors weights of the body onto the version and registers the result as the model's next version. Every tensor must name a parameter or buffer of the model with its shape, as F32, all values finite; otherwise 422 naming the tensor, and nothing is registered.",
    request_body(content_type = "application/octet-stream", content = Vec<u8>),
    responses((status = 201, body = WeightsApplied), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn apply(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath((name, version)): UrlPath<(String, u32)>,
    query: Result<Query<ApplyQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(StatusCode, axum::Json<WeightsApplied>), ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    names::check("model", &name)?;
    let body = body?;
    let registered = tokio::task::spawn_blocking(move || {
        let (bytes, tensors) = applied(&state, &name, version, &body)?;
        let metrics = serde_json::json!({"weights_onto": version, "tensors": tensors});
        let new = models::register_bytes(&state, &name, &bytes, None, &metrics, query.promote)?;
        Ok::<_, ApiError>(WeightsApplied {
            model: name,
            base_version: version,
            version: new,
            tensors,
        })
    });
    Ok((StatusCode::CREATED, axum::Json(registered.await.map_err(ApiError::internal)??)))
}

/// `?dataset=` of an evaluation.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EvaluateQuery {
    /// The data set to evaluate on (all its images).
    pub dataset: String,
}

/// What an evaluation measured.
#[derive(Serialize, ToSchema)]
pub struct Evaluation {
    pub model: String,
    pub version: u32,
    pub dataset: String,
    /// Share of images whose top class is their class.
    pub accuracy: f64,
    /// Mean cross-entropy.
    pub loss: f64,
    pub samples: u64,
    /// Tensors of the body used in place of the version's.
    pub weights_applied: usize,
}

/// A folder under `tmp/` removed with everything in it when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A new empty folder `eval-RANDOM` in `tmp`.
    fn create(tmp: &Path) -> std::io::Result<Self> {
        let mut random = [0u8; 12];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let path = tmp.join(format!("eval-{}", hex::encode(random)));
        std::fs::create_dir(&path)?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Evaluates `version` of `name` (with `body`'s tensors applied) on every image of `dataset`.
fn evaluate_blocking(
    state: &AppState,
    name: String,
    version: u32,
    dataset: String,
    body: &[u8],
) -> Result<Evaluation, ApiError> {
    let (path, bytes) = version_file(state, &name, version)?;
    let tensors = body_tensors(body)?;
    let mut model = Model::from_bytes(&bytes, &path).map_err(ApiError::internal)?;
    let weights_applied = apply_state_dict(&mut model.zoo.graph, &tensors).map_err(bad_weights)?;
    let mut model = model.with_batch(INFERENCE_BATCH).map_err(ApiError::internal)?;
    let folder = Scratch::create(&state.layout.tmp())?;
    runner::link_images(state, &dataset, &folder.0, false)
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    let mut data = open_eval_data(&mut model, &folder.0, &Pipeline::default(), None)
        .map_err(|e| ApiError::invalid(format!("data set '{dataset}': {e}")))?;
    let metrics = Inference::new(&model)
        .and_then(|mut inference| inference.evaluate(&mut data))
        .map_err(|e| ApiError::invalid(format!("evaluating on '{dataset}': {e}")))?;
    Ok(Evaluation {
        model: name,
        version,
        dataset,
        accuracy: metrics.accuracy(),
        loss: metrics.loss(),
        samples: metrics.samples(),
        weights_applied,
    })
}

#[utoipa::path(post, path = "/api/v1/models/{name}/versions/{version}/evaluate", tag = "models", params(EvaluateQuery),
    description = "Evaluates the version on every image of a data set, in the service (no job). A non-empty body is safetensors weights used in place of the version's (checked as for /weights); nothing is registered.",
    request_body(content_type = "application/octet-stream", content = Vec<u8>),
    responses((status = 200, body = Evaluation), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn evaluate(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath((name, version)): UrlPath<(String, u32)>,
    query: Result<Query<EvaluateQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::Json<Evaluation>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let body = body?;
    crate::datasets::find(&state, &query.dataset)?;
    let evaluation = tokio::task::spawn_blocking(move || {
        evaluate_blocking(&state, name, version, query.dataset, &body)
    });
    Ok(axum::Json(evaluation.await.map_err(ApiError::internal)??))
}

//! Predictions on a model's current version: each request's picture is decoded and
//! preprocessed on the blocking pool, then queued to one worker thread per model file,
//! which runs the requests waiting at that moment (up to [`MAX_BATCH`]) as one batch.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use serde::{Deserialize, Serialize};
use sprout_data::{load_resized, Rng};
use sprout_train::{image_input, softmax, ImageInput, Inference, Model};
use tokio::sync::oneshot;
use utoipa::{IntoParams, ToSchema};

use crate::api::AppState;
use crate::auth::{Access, Read};
use crate::datasets::{image_limits, MAX_IMAGE_BYTES};
use crate::error::{ApiError, ErrorBody};
use crate::models::{resolve_version, version_hash};
use crate::store::Staged;

/// The most pictures one pass runs.
pub const MAX_BATCH: usize = 32;
/// How long the worker waits for more requests after the first before running.
const GATHER: Duration = Duration::from_millis(2);

/// `?top_k=&version=`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PredictQuery {
    /// How many classes to return, most probable first (default 3).
    pub top_k: Option<usize>,
    /// A version other than the current one.
    pub version: Option<u32>,
}

/// A class and its probability.
#[derive(Serialize, ToSchema)]
pub struct ClassScore {
    pub class: String,
    pub probability: f32,
}

/// The answer to a prediction.
#[derive(Serialize, ToSchema)]
pub struct PredictAnswer {
    pub model: String,
    pub version: u32,
    pub top: Vec<ClassScore>,
    /// How many pictures ran in the same pass as this one.
    pub batch: usize,
}

/// One picture waiting for the worker.
struct Request {
    x: Vec<f32>,
    reply: oneshot::Sender<Result<(Vec<f32>, usize), String>>,
}

/// A model file's worker: its preprocessing and its queue.
#[derive(Clone)]
struct Worker {
    input: ImageInput,
    classes: Vec<String>,
    queue: mpsc::Sender<Request>,
}

/// The workers, by model file hash.
#[derive(Default)]
pub struct Predictors {
    workers: Mutex<HashMap<String, Worker>>,
}

impl Predictors {
    /// The worker of the model file `hash` at `path`, started if needed.
    fn worker(&self, hash: &str, path: PathBuf) -> Result<Worker, ApiError> {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(worker) = workers.get(hash) {
            return Ok(worker.clone());
        }
        let (queue, requests) = mpsc::channel();
        let (opened, ready) = mpsc::sync_channel(1);
        // The model lives on its worker thread (a graph is not `Send`).
        std::thread::Builder::new()
            .name(format!("predict-{}", &hash[..8]))
            .spawn(move || {
                let model = match Model::open(&path) {
                    Ok(model) => model,
                    Err(error) => return drop(opened.send(Err(ApiError::internal(error)))),
                };
                let input = image_input(&model, None).map_err(|e| {
                    ApiError::invalid(format!("this model does not take pictures: {e}"))
                });
                let usable = input.is_ok();
                let _ = opened.send(input.map(|input| (input, model.metadata.class_names.clone())));
                if usable {
                    serve_batches(&model, &requests);
                }
            })
            .map_err(ApiError::internal)?;
        let (input, classes) = ready.recv().map_err(ApiError::internal)??;
        let worker = Worker { input, classes, queue };
        workers.insert(hash.to_string(), worker.clone());
        Ok(worker)
    }
}

/// The worker loop: gathers waiting requests into one pass until the queue closes.
fn serve_batches(model: &Model, requests: &mpsc::Receiver<Request>) {
    let mut passes: HashMap<usize, Inference> = HashMap::new();
    while let Ok(first) = requests.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.recv_timeout(GATHER) {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let n = batch.len();
        let x: Vec<f32> = batch.iter().flat_map(|r| r.x.iter().copied()).collect();
        let logits = match passes.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut().run(&x),
            std::collections::hash_map::Entry::Vacant(e) => {
                match model.with_batch(n).and_then(|m| Inference::new(&m)) {
                    Ok(pass) => e.insert(pass).run(&x),
                    Err(error) => Err(error),
                }
            }
        };
        let classes = model.classes();
        match logits {
            Ok(logits) => {
                for (request, row) in batch.into_iter().zip(logits.chunks_exact(classes)) {
                    let _ = request.reply.send(Ok((row.to_vec(), n)));
                }
            }
            Err(error) => {
                for request in batch {
                    let _ = request.reply.send(Err(error.to_string()));
                }
            }
        }
    }
}

/// The picture `bytes` as `input` says: staged in `tmp/`, decoded with the upload limits.
fn preprocess(state: &AppState, input: ImageInput, bytes: &[u8]) -> Result<Vec<f32>, ApiError> {
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!("the picture has {} bytes, over the limit of {MAX_IMAGE_BYTES}", bytes.len()),
        ));
    }
    let staged = Staged::write(&state.layout.tmp(), "predict", bytes)?;
    let limits = image_limits();
    let resized =
        load_resized(&staged.path, input.size, input.size, input.fit, &limits).map_err(|e| {
            ApiError::invalid(
                e.to_string().replace(&staged.path.display().to_string(), "the picture"),
            )
        })?;
    let mut x = Vec::new();
    input.eval.apply(&resized, &mut Rng::new(0), &mut x);
    Ok(x)
}

#[utoipa::path(post, path = "/api/v1/models/{name}/predict", tag = "models", params(PredictQuery),
    description = "The request body is one PNG or JPEG picture; answers its most probable classes. Concurrent requests run in shared batches.",
    request_body(content_type = "application/octet-stream", content = Vec<u8>),
    responses((status = 200, body = PredictAnswer), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn predict(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    query: Result<Query<PredictQuery>, axum::extract::rejection::QueryRejection>,
    bytes: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::Json<PredictAnswer>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let bytes = bytes?;
    let version = resolve_version(&state, &name, query.version)?;
    let hash = version_hash(&state, &name, version)?;
    let worker = {
        let (state, path) = (state.clone(), state.layout.model(&hash));
        tokio::task::spawn_blocking(move || {
            let worker = state.predictors.worker(&hash, path)?;
            let x = preprocess(&state, worker.input, &bytes)?;
            Ok::<_, ApiError>((worker, x))
        })
    };
    let (worker, x) = worker.await.map_err(ApiError::internal)??;
    let (reply, answer) = oneshot::channel();
    worker
        .queue
        .send(Request { x, reply })
        .map_err(|_| ApiError::internal("the prediction worker stopped"))?;
    let (logits, batch) = answer.await.map_err(ApiError::internal)?.map_err(ApiError::internal)?;
    let probabilities = softmax(&logits);
    let mut order: Vec<usize> = (0..probabilities.len()).collect();
    order.sort_by(|&a, &b| probabilities[b].total_cmp(&probabilities[a]));
    let top = order
        .into_iter()
        .take(query.top_k.unwrap_or(3).max(1))
        .map(|i| ClassScore { class: worker.classes[i].clone(), probability: probabilities[i] })
        .collect();
    Ok(axum::Json(PredictAnswer { model: name, version, top, batch }))
}

#[cfg(test)]
mod tests {
    use super::{serve_batches, Request, MAX_BATCH};
    use sprout_train::Model;
    use sprout_zoo::Architecture;
    use std::sync::mpsc;
    use tokio::sync::oneshot;

    /// Runs `inputs` through a worker, all queued before it starts: (logits, batch) each.
    fn run(model: &Model, inputs: &[Vec<f32>]) -> Vec<(Vec<f32>, usize)> {
        let (queue, requests) = mpsc::channel();
        let mut answers = Vec::new();
        for x in inputs {
            let (reply, answer) = oneshot::channel();
            queue.send(Request { x: x.clone(), reply }).unwrap();
            answers.push(answer);
        }
        drop(queue);
        serve_batches(model, &requests);
        answers.into_iter().map(|mut a| a.try_recv().unwrap().unwrap()).collect()
    }

    #[test]
    fn waiting_requests_run_as_one_batch_with_the_same_answers() {
        let model = Model::from_zoo(Architecture::Mlp, 1, 0).unwrap();
        let inputs: Vec<Vec<f32>> = (0..MAX_BATCH + 3)
            .map(|i| (0..64).map(|j| ((i * 64 + j) % 17) as f32 / 17.0).collect())
            .collect();
        let together = run(&model, &inputs);
        let batches: Vec<usize> = together.iter().map(|(_, batch)| *batch).collect();
        assert_eq!(batches, [vec![MAX_BATCH; MAX_BATCH], vec![3; 3]].concat());
        for (x, (logits, _)) in inputs.iter().zip(&together) {
            let alone = run(&model, std::slice::from_ref(x));
            assert_eq!(alone[0].1, 1);
            for (a, b) in alone[0].0.iter().zip(logits) {
                assert!((a - b).abs() < 1e-5, "batched {b} against alone {a}");
            }
        }
    }
}

//! The service's shared state and its routes: `/healthz`, `/api/v1/openapi.json` and the
//! data set, job, model and token endpoints, with the body limit and JSON errors for
//! everything axum would answer in plain text.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State as StateOf};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{insert_token, Access, Admin, Scope};
use crate::db::Db;
use crate::error::{no_method, no_route, ApiError, ErrorBody, Json};
use crate::events::Hub;
use crate::layout::Layout;
use crate::predict::Predictors;
use crate::runner::Runners;
use crate::{boards, datasets, drain, events, jobs, models, openapi, params, predict, web, Config};

/// Everything the handlers and runners share.
pub struct State {
    /// The data folder's lock, held while the service runs.
    _lock: std::fs::File,
    pub db: Db,
    pub layout: Layout,
    pub hub: Hub,
    pub runners: Runners,
    pub predictors: Predictors,
    /// The `sprout` binary jobs and exports run.
    pub sprout: PathBuf,
    pub memory_limit: Option<u64>,
    pub max_body_bytes: usize,
}

/// The state as handlers hold it.
pub type AppState = Arc<State>;

impl State {
    /// Opens the data folder of `config` (creating and migrating it).
    pub fn open(config: &Config) -> anyhow::Result<AppState> {
        let layout = Layout::create(&config.data_dir)?;
        let lock = layout.claim()?;
        let db = Db::open(&layout.database())?;
        Ok(Arc::new(State {
            _lock: lock,
            db,
            layout,
            hub: Hub::default(),
            runners: Runners::default(),
            predictors: Predictors::default(),
            sprout: config.sprout.clone(),
            memory_limit: config.memory_limit,
            max_body_bytes: config.max_body_bytes,
        }))
    }
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

#[utoipa::path(get, path = "/healthz", tag = "service", security(()), responses((status = 200, body = Health)))]
pub async fn healthz(StateOf(state): StateOf<AppState>) -> Result<axum::Json<Health>, ApiError> {
    // A query proves the database answers.
    state.db.lock().query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?;
    Ok(axum::Json(Health { status: "ok".into(), version: sprout_train::version_string() }))
}

/// `POST /api/v1/tokens`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// `read`, `train` or `admin`.
    pub scope: String,
    /// What the token is for (shown nowhere else).
    #[serde(default)]
    pub label: String,
}

/// A token, shown this once.
#[derive(Serialize, ToSchema)]
pub struct TokenCreated {
    pub token: String,
    pub scope: String,
}

#[utoipa::path(post, path = "/api/v1/tokens", tag = "service", request_body = NewToken,
    responses((status = 201, body = TokenCreated), (status = 403, body = ErrorBody)))]
pub async fn create_token(
    _: Access<Admin>,
    StateOf(state): StateOf<AppState>,
    Json(request): Json<NewToken>,
) -> Result<(StatusCode, axum::Json<TokenCreated>), ApiError> {
    let scope = Scope::parse(&request.scope).map_err(ApiError::invalid)?;
    let token = insert_token(&state.db, scope, &request.label).map_err(ApiError::internal)?;
    Ok((StatusCode::CREATED, axum::Json(TokenCreated { token, scope: scope.name().into() })))
}

/// A token as listed: never the token itself, which only its creator saw.
#[derive(Serialize, ToSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub scope: String,
    pub label: String,
    /// Unix seconds.
    pub created: i64,
}

#[utoipa::path(get, path = "/api/v1/tokens", tag = "service",
    responses((status = 200, body = [TokenInfo]), (status = 403, body = ErrorBody)))]
pub async fn list_tokens(
    _: Access<Admin>,
    StateOf(state): StateOf<AppState>,
) -> Result<axum::Json<Vec<TokenInfo>>, ApiError> {
    let db = state.db.lock();
    let mut statement = db.prepare("SELECT id, scope, label, created FROM tokens ORDER BY id")?;
    let tokens = statement
        .query_map([], |r| {
            Ok(TokenInfo { id: r.get(0)?, scope: r.get(1)?, label: r.get(2)?, created: r.get(3)? })
        })?
        .collect::<Result<_, _>>()?;
    Ok(axum::Json(tokens))
}

#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "service",
    description = "Revokes a token: it is refused (401) from then on.",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    _: Access<Admin>,
    StateOf(state): StateOf<AppState>,
    axum::extract::Path(id): axum::extract::Path<i64>,
) -> Result<StatusCode, ApiError> {
    match state.db.lock().execute("DELETE FROM tokens WHERE id = ?1", [id])? {
        0 => Err(ApiError::not_found(format!("token {id}"))),
        _ => Ok(StatusCode::NO_CONTENT),
    }
}

/// The whole service.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/openapi.json", get(openapi::document))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/api/v1/datasets", get(datasets::list).post(datasets::create))
        .route("/api/v1/datasets/{name}", get(datasets::get).delete(datasets::delete))
        .route("/api/v1/datasets/{name}/images", post(datasets::upload))
        .route("/api/v1/jobs", get(jobs::list).post(jobs::create))
        .route("/api/v1/jobs/{id}", get(jobs::get))
        .route("/api/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/api/v1/jobs/{id}/events", get(events::stream))
        .route("/api/v1/models", get(models::list))
        .route("/api/v1/models/{name}", get(models::get))
        .route("/api/v1/models/{name}/versions", post(models::upload))
        .route(
            "/api/v1/models/{name}/versions/{version}",
            axum::routing::delete(models::delete_version),
        )
        .route("/api/v1/models/{name}/versions/{version}/file", get(models::download))
        .route("/api/v1/models/{name}/versions/{version}/weights", post(params::apply))
        .route("/api/v1/models/{name}/versions/{version}/evaluate", post(params::evaluate))
        .route("/api/v1/models/{name}/promote", post(models::promote))
        .route("/api/v1/models/{name}/rollback", post(models::rollback))
        .route("/api/v1/models/{name}/predict", post(predict::predict))
        .merge(boards::routes())
        .merge(web::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(drain::drain_unread))
        .with_state(state)
}

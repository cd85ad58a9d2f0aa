//! The OpenAPI 3.1 document of the service, generated from the handlers' annotations and
//! served at `/api/v1/openapi.json`; every route but `/healthz` needs a bearer token.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{api, boards, datasets, error, events, jobs, models, params, predict};

#[derive(OpenApi)]
#[openapi(
    info(title = "sprout serve", description = "Data sets, fine-tuning jobs, a model registry and predictions on an edge box."),
    paths(
        api::healthz, api::create_token, api::list_tokens, api::revoke_token,
        datasets::create, datasets::list, datasets::get, datasets::delete, datasets::upload,
        jobs::create, jobs::list, jobs::get, jobs::cancel, events::stream,
        models::list, models::get, models::upload, models::promote, models::rollback, models::download,
        models::delete_version,
        predict::predict, params::apply, params::evaluate,
        boards::register, boards::list, boards::get_board, boards::delete, boards::train_job,
        boards::push_job, boards::pull_job,
    ),
    components(schemas(error::ErrorBody)),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// Declares the bearer token scheme.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `GET /api/v1/openapi.json` (no token needed: it describes, it reveals nothing stored).
pub async fn document() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(ApiDoc::openapi())
}

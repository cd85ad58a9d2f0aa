//! The web page at `/`: its HTML, script and style sheet, embedded in the binary and served
//! without a token (they hold no data: the script asks the API with the token the user
//! enters), under a Content-Security-Policy that allows no inline script, with their content
//! types and ETag revalidation.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    body: &'static [u8],
    content_type: &'static str,
}

const PAGE: Asset =
    Asset { body: include_bytes!("../web/index.html"), content_type: "text/html; charset=utf-8" };
const SCRIPT: Asset =
    Asset { body: include_bytes!("../web/app.js"), content_type: "text/javascript; charset=utf-8" };
const STYLE: Asset =
    Asset { body: include_bytes!("../web/app.css"), content_type: "text/css; charset=utf-8" };

/// Scripts and styles come only from the service's own files; the API is the only place
/// the page connects to; pictures the user picks are shown from `blob:` URLs.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; form-action 'none'; \
     base-uri 'none'; frame-ancestors 'none'";

/// The page's routes (`/`, `/app.js`, `/app.css`), for any router state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { PAGE.serve(&headers) }))
        .route("/app.js", get(|headers: HeaderMap| async move { SCRIPT.serve(&headers) }))
        .route("/app.css", get(|headers: HeaderMap| async move { STYLE.serve(&headers) }))
}

impl Asset {
    /// A strong validator: the first 16 hex digits of the file's SHA-256, quoted.
    fn etag(&self) -> String {
        format!("\"{}\"", hex::encode(&Sha256::digest(self.body)[..8]))
    }

    /// The file, or 304 when the request's `If-None-Match` names its ETag. `no-cache`: the
    /// browser keeps its copy but asks again each time, so a new binary's page is never stale.
    fn serve(&self, request: &HeaderMap) -> Response {
        let etag = self.etag();
        let fresh =
            request.get(header::IF_NONE_MATCH).and_then(|value| value.to_str().ok()).is_some_and(
                |tags| tags.split(',').map(str::trim).any(|tag| tag == "*" || tag == etag),
            );
        let (status, body) = match fresh {
            true => (StatusCode::NOT_MODIFIED, &[][..]),
            false => (StatusCode::OK, self.body),
        };
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        for (name, value) in [
            (header::CONTENT_TYPE, self.content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        if let Ok(etag) = HeaderValue::from_str(&etag) {
            headers.insert(header::ETAG, etag);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(asset: &Asset) -> &'static str {
        std::str::from_utf8(asset.body).unwrap()
    }

    #[test]
    fn files_come_with_their_type_policy_and_validator_and_revalidate_to_304() {
        for asset in [&PAGE, &SCRIPT, &STYLE] {
            let response = asset.serve(&HeaderMap::new());
            assert_eq!(response.status(), StatusCode::OK);
            let headers = response.headers();
            assert_eq!(headers[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
            assert!(headers[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self';"));
            let etag = headers[header::ETAG].clone();
            assert_eq!(etag.len(), 18);

            let mut again = HeaderMap::new();
            again.insert(header::IF_NONE_MATCH, etag.clone());
            assert_eq!(asset.serve(&again).status(), StatusCode::NOT_MODIFIED);
            again.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"0000\", \"1111\""));
            assert_eq!(asset.serve(&again).status(), StatusCode::OK);
        }
        assert_ne!(PAGE.etag(), SCRIPT.etag());
    }

    #[test]
    fn the_page_has_no_inline_script_or_style_for_the_policy_to_block() {
        let page = text(&PAGE);
        assert!(page.contains("<script src=\"/app.js\" defer></script>"));
        assert!(page.contains("<link rel=\"stylesheet\" href=\"/app.css\">"));
        assert_eq!(page.matches("<script").count(), 1, "one script, from its file");
        assert!(!page.contains("style="), "no inline style attributes");
        let handler = page.split(" on").skip(1).any(|rest| {
            let attribute = rest.trim_start_matches(|c: char| c.is_ascii_lowercase());
            attribute.len() < rest.len() && attribute.starts_with('=')
        });
        assert!(!handler, "no inline event handlers");
        assert!(!text(&SCRIPT).contains("innerHTML"), "text goes in as text, never as markup");
    }
}

//! Keeps kept-alive connections usable when a handler answers without reading the whole
//! request body (a 401, 403, 404, 413 or 422 decided before the body, or a bodiless POST whose
//! chunked end marker is still on its way).
//!
//! hyper, finding the body dropped unread, tries to read the rest once and otherwise closes
//! the connection, after it may have sent a response that promised to keep it open; a client
//! reusing that connection then fails ("Peer disconnected", "connection reset"). This layer
//! takes the unread rest back from the handler and reads it to its end (at most
//! [`DRAIN_BYTES`] within [`DRAIN_TIME`]) before the response leaves; a rest it cannot read
//! that way makes the response say `Connection: close`, so the client opens a new one.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header::{CONNECTION, EXPECT};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use http_body::{Frame, SizeHint};

/// The most unread body bytes read and dropped to keep a connection open.
const DRAIN_BYTES: u64 = 1 << 20;
/// How long the client may take to send them.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The middleware: runs the request and reads what its handler left of the body.
pub async fn drain_unread(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    // A client waiting for `100 Continue` sends nothing unless asked: an untouched body is
    // not asked for, the connection is closed instead.
    let awaits_continue = parts
        .headers
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let rest = Arc::new(Mutex::new(None));
    let tracked = Tracked { inner: Some(body), polled: false, rest: Arc::clone(&rest) };
    let mut response = next.run(Request::from_parts(parts, Body::new(tracked))).await;
    let unread = rest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    if let Some(Unread { body, polled }) = unread {
        let reusable = (polled || !awaits_continue) && drain(body).await;
        if !reusable {
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        }
    }
    response
}

/// Reads `body` to its end, if it ends within the limits.
async fn drain(body: Body) -> bool {
    if body.size_hint().lower() > DRAIN_BYTES {
        return false;
    }
    let mut stream = body.into_data_stream();
    let read_all = async {
        let mut total = 0u64;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => total += bytes.len() as u64,
                Err(_) => return false,
            }
            if total > DRAIN_BYTES {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, read_all).await.unwrap_or(false)
}

/// What a handler left of a body.
struct Unread {
    body: Body,
    /// Whether the handler read any of it.
    polled: bool,
}

/// A request body that, dropped before its end, leaves the rest in `rest`.
struct Tracked {
    inner: Option<Body>,
    polled: bool,
    rest: Arc<Mutex<Option<Unread>>>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.polled = true;
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        let frame = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.inner = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|body| body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), |body| body.size_hint())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take().filter(|b| !b.is_end_stream()) {
            let unread = Unread { body, polled: self.polled };
            *self.rest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(unread);
        }
    }
}

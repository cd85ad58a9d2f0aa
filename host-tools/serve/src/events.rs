//! Job events: every event is stored in `job_events` (so a late client sees the whole
//! history) and broadcast to live listeners; `GET /api/v1/jobs/{id}/events` replays the
//! history as Server-Sent Events, then streams new events until the job ends.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use tokio::sync::broadcast;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::auth::{Access, Read};
use crate::db::{now, Db};
use crate::error::{ApiError, ErrorBody};

/// One stored event.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct JobEvent {
    /// Increasing over all jobs; the SSE event id.
    pub id: i64,
    pub job: i64,
    /// `status` (`{status, error}`), `start`, `progress` (per batch: epoch, batch, step,
    /// steps, loss, images_per_second, eta_seconds), `epoch` (epoch, train_loss, val_loss,
    /// val_accuracy, learning_rate, images_per_second, eta_seconds) or `log` (`{line}`).
    pub kind: String,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// Unix seconds.
    pub at: i64,
}

impl JobEvent {
    /// Whether this event ends its job's stream.
    fn is_final(&self) -> bool {
        self.kind == "status" && self.data["status"].as_str().is_some_and(crate::jobs::is_terminal)
    }
}

/// Where events go: the database and the live listeners.
#[derive(Clone)]
pub struct Hub {
    sender: broadcast::Sender<JobEvent>,
}

impl Default for Hub {
    /// A hub keeping up to 1024 events for slow listeners (slower ones read the database).
    fn default() -> Self {
        Self { sender: broadcast::channel(1024).0 }
    }
}

impl Hub {
    /// Stores an event of job `job` and sends it to the listeners.
    pub fn record(
        &self,
        db: &Db,
        job: i64,
        kind: &str,
        data: serde_json::Value,
    ) -> rusqlite::Result<()> {
        let at = now();
        let id = {
            let connection = db.lock();
            connection.execute(
                "INSERT INTO job_events (job_id, kind, data, at) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![job, kind, data.to_string(), at],
            )?;
            connection.last_insert_rowid()
        };
        // No listener is not an error.
        let _ = self.sender.send(JobEvent { id, job, kind: kind.to_string(), data, at });
        Ok(())
    }
}

/// The stored events of job `job` after event id `after`.
pub fn history(db: &Db, job: i64, after: i64) -> Result<Vec<JobEvent>, ApiError> {
    let connection = db.lock();
    let mut statement = connection.prepare(
        "SELECT id, kind, data, at FROM job_events WHERE job_id = ?1 AND id > ?2 ORDER BY id",
    )?;
    let rows = statement.query_map(rusqlite::params![job, after], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut events = Vec::new();
    for row in rows {
        let (id, kind, data, at) = row?;
        let data = serde_json::from_str(&data).map_err(ApiError::internal)?;
        events.push(JobEvent { id, job, kind, data, at });
    }
    Ok(events)
}

#[utoipa::path(get, path = "/api/v1/jobs/{id}/events", tag = "jobs",
    description = "Server-Sent Events: the job's stored events (after the Last-Event-ID header, if sent), then new ones until the job ends.",
    responses((status = 200, content_type = "text/event-stream", body = JobEvent), (status = 404, body = ErrorBody)))]
pub async fn stream(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(job): UrlPath<i64>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    crate::jobs::load(&state, job)?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    // Listen before reading the history, so nothing falls between the two.
    let receiver = state.hub.sender.subscribe();
    let backlog = history(&state.db, job, after)?;
    let done = backlog.iter().any(JobEvent::is_final);
    let start = Replay { state, job, last: after, backlog: backlog.into(), receiver, done };
    let events = stream::unfold(start, |mut replay| async move {
        let event = replay.next().await?;
        let sse = Event::default().id(event.id.to_string()).event(event.kind.clone()).data(
            serde_json::to_string(&event).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        );
        Some((Ok(sse), replay))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The state of one SSE stream: stored events still to send, then live ones.
struct Replay {
    state: AppState,
    job: i64,
    last: i64,
    backlog: std::collections::VecDeque<JobEvent>,
    receiver: broadcast::Receiver<JobEvent>,
    /// The backlog holds the final event: end after it.
    done: bool,
}

impl Replay {
    /// The next event to send, or `None` after the job's final one.
    async fn next(&mut self) -> Option<JobEvent> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.last = event.id;
                return Some(event);
            }
            if self.done {
                return None;
            }
            match self.receiver.recv().await {
                Ok(event) if event.job == self.job && event.id > self.last => {
                    self.done = event.is_final();
                    self.last = event.id;
                    return Some(event);
                }
                Ok(_) => {}
                // Too slow a listener: catch up from the database.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let missed = history(&self.state.db, self.job, self.last).ok()?;
                    self.done = missed.iter().any(JobEvent::is_final);
                    self.backlog = missed.into();
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

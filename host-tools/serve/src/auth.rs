//! Bearer tokens with scopes: `read` (look), `train` (upload, train, promote, predict) and
//! `admin` (tokens); each scope includes the ones before it. A token is 32 random bytes shown
//! once; the database keeps only its SHA-256.

use std::marker::PhantomData;
use std::path::Path;

use anyhow::Context;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use sha2::{Digest, Sha256};

use crate::api::AppState;
use crate::db::{now, Db};
use crate::error::ApiError;
use crate::layout::Layout;

/// What a token may do; each scope includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Read,
    Train,
    Admin,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Train => "train",
            Scope::Admin => "admin",
        }
    }

    /// The scope called `name`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "read" => Ok(Scope::Read),
            "train" => Ok(Scope::Train),
            "admin" => Ok(Scope::Admin),
            other => Err(format!("unknown scope '{other}' (read, train or admin)")),
        }
    }
}

/// The prefix of every token, so a leaked one is recognisable.
const PREFIX: &str = "sprout_";

/// The stored form of a token.
fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Creates a token with `scope` in `db`, labelled `label`; returns the token, which is not
/// stored anywhere.
pub fn insert_token(db: &Db, scope: Scope, label: &str) -> anyhow::Result<String> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no system randomness: {e}"))?;
    let token = format!("{PREFIX}{}", hex::encode(secret));
    db.lock().execute(
        "INSERT INTO tokens (hash, scope, label, created) VALUES (?1, ?2, ?3, ?4)",
        rusqlite::params![hash(&token), scope.name(), label, now()],
    )?;
    Ok(token)
}

/// `sprout serve token create`: a token for the data folder `data_dir` (its database is
/// created and migrated if needed).
pub fn create_token(data_dir: &Path, scope: Scope, label: &str) -> anyhow::Result<String> {
    let layout = Layout::create(data_dir)?;
    let db = Db::open(&layout.database())?;
    insert_token(&db, scope, label).context("cannot store the token")
}

/// The scope of the bearer token in `parts`: 401 without one or with an unknown one.
fn scope_of(parts: &Parts, db: &Db) -> Result<Scope, ApiError> {
    let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, message);
    let value = parts
        .headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("missing token: send 'Authorization: Bearer TOKEN'"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| unauthorized("the Authorization header is not 'Bearer TOKEN'"))?;
    let stored: Option<String> = db
        .lock()
        .query_row("SELECT scope FROM tokens WHERE hash = ?1", [hash(token)], |r| r.get(0))
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            other => Err(other),
        })?;
    let stored = stored.ok_or_else(|| unauthorized("unknown token"))?;
    Scope::parse(&stored).map_err(ApiError::internal)
}

/// The scope a route needs, as a type.
pub trait Needs {
    const SCOPE: Scope;
}

pub struct Read;
pub struct Train;
pub struct Admin;

impl Needs for Read {
    const SCOPE: Scope = Scope::Read;
}
impl Needs for Train {
    const SCOPE: Scope = Scope::Train;
}
impl Needs for Admin {
    const SCOPE: Scope = Scope::Admin;
}

/// Proof that the request's token has scope `N::SCOPE` (or a wider one): 401 without a
/// valid token, 403 with too narrow a scope.
pub struct Access<N: Needs>(PhantomData<N>);

impl<N: Needs> FromRequestParts<AppState> for Access<N> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let scope = scope_of(parts, &state.db)?;
        if scope < N::SCOPE {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this needs a token with scope '{}'; yours has '{}'",
                    N::SCOPE.name(),
                    scope.name()
                ),
            ));
        }
        Ok(Self(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::{hash, insert_token, Scope};
    use crate::db::Db;

    #[test]
    fn tokens_are_random_and_stored_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("sprout.db")).unwrap();
        let a = insert_token(&db, Scope::Read, "a").unwrap();
        let b = insert_token(&db, Scope::Read, "b").unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("sprout_") && a.len() == 7 + 64, "{a}");
        let stored: Vec<String> = db
            .lock()
            .prepare("SELECT hash FROM tokens ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(stored, [hash(&a), hash(&b)]);
        assert!(!stored.iter().any(|h| h.contains(&a[7..])));
    }

    #[test]
    fn scopes_are_ordered_and_parse() {
        assert!(Scope::Read < Scope::Train && Scope::Train < Scope::Admin);
        assert_eq!(Scope::parse("train"), Ok(Scope::Train));
        assert!(Scope::parse("root").unwrap_err().contains("read, train or admin"));
    }
}

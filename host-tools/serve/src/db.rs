//! The SQLite database in the data folder: opening it (WAL journal, foreign keys, a busy
//! timeout so the `token create` command and the service can share it) and migrating its
//! schema, one step per `user_version`.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use rusqlite::Connection;

/// The schema, one migration per version: migration `i` takes `user_version` `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: tokens, data sets and their samples, jobs and their events, models and versions.
    "CREATE TABLE tokens (
        id INTEGER PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        label TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE TABLE datasets (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        classes TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY,
        dataset_id INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,
        class TEXT NOT NULL,
        hash TEXT NOT NULL,
        ext TEXT NOT NULL,
        name TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        created INTEGER NOT NULL,
        UNIQUE (dataset_id, hash)
    );
    CREATE INDEX samples_hash ON samples (hash);
    CREATE TABLE models (
        name TEXT PRIMARY KEY,
        current_version INTEGER,
        previous_version INTEGER,
        created INTEGER NOT NULL
    );
    CREATE TABLE model_versions (
        model TEXT NOT NULL REFERENCES models(name) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        hash TEXT NOT NULL,
        classes TEXT NOT NULL,
        job_id INTEGER,
        metrics TEXT NOT NULL,
        created INTEGER NOT NULL,
        PRIMARY KEY (model, version)
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        dataset TEXT NOT NULL,
        model TEXT NOT NULL,
        request TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        estimate_bytes INTEGER NOT NULL,
        version INTEGER,
        created INTEGER NOT NULL,
        started INTEGER,
        finished INTEGER
    );
    CREATE INDEX jobs_status ON jobs (status, id);
    CREATE TABLE job_events (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE INDEX job_events_job ON job_events (job_id, id);",
    // 2: boards (their port, the registry version their firmware's bundle was made from,
    // what they said when registered), board training jobs, and the device checkpoint a
    // version pulled from a board came from.
    "CREATE TABLE boards (
        name TEXT PRIMARY KEY,
        port TEXT NOT NULL,
        baud INTEGER,
        model TEXT NOT NULL,
        version INTEGER NOT NULL,
        bundle TEXT NOT NULL,
        model_hash TEXT NOT NULL,
        classes TEXT NOT NULL,
        sample_width INTEGER NOT NULL,
        sample_height INTEGER NOT NULL,
        created INTEGER NOT NULL
    );
    ALTER TABLE jobs ADD COLUMN board TEXT;
    ALTER TABLE model_versions ADD COLUMN device_checkpoint TEXT;",
    // 3: the highest version number a model ever had, so that a deleted version's number
    // is never given to another one.
    "ALTER TABLE models ADD COLUMN last_version INTEGER NOT NULL DEFAULT 0;
    UPDATE models SET last_version =
        (SELECT COALESCE(MAX(version), 0) FROM model_versions WHERE model = models.name);",
    // 4: whether a board trains from its input (its samples streamed every epoch). Boards
    // registered before had the head-only bundle (the only one the service made then),
    // which never does.
    "ALTER TABLE boards ADD COLUMN streams INTEGER NOT NULL DEFAULT 0;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// The shared connection.
#[derive(Clone)]
pub struct Db(Arc<Mutex<Connection>>);

impl Db {
    /// Opens (creating) the database at `path` and brings its schema up to date; a database
    /// from a newer build is refused.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut connection = Connection::open(path)
            .with_context(|| format!("cannot open the database {}", path.display()))?;
        migrate(&mut connection).with_context(|| format!("database {}", path.display()))?;
        Ok(Self(Arc::new(Mutex::new(connection))))
    }

    /// The connection, for one short piece of work.
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (each statement is atomic).
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Sets the connection's pragmas and runs the migrations it has not had, each in a
/// transaction with its `user_version` bump.
fn migrate(connection: &mut Connection) -> anyhow::Result<()> {
    connection.busy_timeout(std::time::Duration::from_secs(5))?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    let version: usize = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        anyhow::bail!(
            "schema version {version} is newer than this sprout's ({SCHEMA_VERSION}): use a \
             newer sprout"
        );
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let transaction = connection.transaction()?;
        transaction.execute_batch(sql).with_context(|| format!("migration {}", index + 1))?;
        transaction.pragma_update(None, "user_version", index + 1)?;
        transaction.commit()?;
    }
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::{Db, SCHEMA_VERSION};

    #[test]
    fn migrations_run_once_and_newer_schemas_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sprout.db");
        let db = Db::open(&path).unwrap();
        db.lock()
            .execute("INSERT INTO datasets (name, classes, created) VALUES ('a', '[]', 0)", [])
            .unwrap();
        drop(db);
        // Opening again migrates nothing and keeps the rows.
        let db = Db::open(&path).unwrap();
        let count: i64 =
            db.lock().query_row("SELECT COUNT(*) FROM datasets", [], |r| r.get(0)).unwrap();
        assert_eq!(count, 1);
        db.lock().pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        drop(db);
        let error = Db::open(&path).err().unwrap();
        assert!(format!("{error:#}").contains("newer than this sprout"), "{error:#}");
    }
}

//! Data sets: created with their class names, filled by multipart uploads of labelled images
//! (each file checked by `sprout-data`'s decoder with the service's limits and reported on
//! its own; duplicates found by content hash), listed, inspected and deleted.

use std::path::Path;

use axum::extract::{Multipart, Path as UrlPath, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::AppState;
use crate::auth::{Access, Read, Train};
use crate::db::now;
use crate::error::{ApiError, ErrorBody, Json};
use crate::names;
use crate::store::{sha256, Staged};

/// Bytes one uploaded image may hold.
pub const MAX_IMAGE_BYTES: u64 = 32 << 20;
/// Pixels one uploaded image's header may declare (decompression bombs are refused before
/// any pixel is decoded).
pub const MAX_IMAGE_PIXELS: u64 = 40_000_000;

/// The decoder's limits for a picture sent to the service: sprout's own policy (its memory
/// limit, archive inflation), with the service's tighter size and pixel limits.
pub fn image_limits() -> sprout_data::Limits {
    sprout_data::Limits {
        max_pixels: MAX_IMAGE_PIXELS,
        max_file_bytes: MAX_IMAGE_BYTES,
        ..sprout_data::Limits::current()
    }
}
/// Classes one data set may have.
const MAX_CLASSES: usize = 1000;

/// `POST /api/v1/datasets`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDataset {
    /// 1 to 64 letters, digits, `_`, `-`, `.`.
    pub name: String,
    /// The class names (same rules as `name`), in the order models will use.
    pub classes: Vec<String>,
}

/// A class and how many images it has.
#[derive(Serialize, ToSchema)]
pub struct ClassCount {
    pub name: String,
    pub images: u64,
}

/// A data set.
#[derive(Serialize, ToSchema)]
pub struct DatasetInfo {
    pub name: String,
    pub classes: Vec<ClassCount>,
    pub images: u64,
    /// Unix seconds.
    pub created: i64,
}

/// One stored image of a data set.
#[derive(Serialize, ToSchema)]
pub struct Sample {
    /// SHA-256 of the file.
    pub hash: String,
    pub class: String,
    /// The file name it was uploaded as.
    pub name: String,
    pub bytes: u64,
    pub width: u32,
    pub height: u32,
}

/// A data set with its images.
#[derive(Serialize, ToSchema)]
pub struct DatasetDetail {
    pub dataset: DatasetInfo,
    pub samples: Vec<Sample>,
}

/// What happened to one uploaded file.
#[derive(Serialize, ToSchema)]
pub struct FileReport {
    /// The file name as uploaded.
    pub name: String,
    /// The form field's name: the class.
    pub class: String,
    /// `added`, `duplicate` (the data set has these bytes already) or `rejected`.
    pub status: String,
    pub hash: Option<String>,
    /// Why the file was rejected, or which class holds its duplicate.
    pub detail: Option<String>,
}

/// The answer to an upload.
#[derive(Serialize, ToSchema)]
pub struct UploadReport {
    pub added: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub files: Vec<FileReport>,
}

/// The id and classes of data set `name`, or 404.
pub fn find(state: &AppState, name: &str) -> Result<(i64, Vec<String>), ApiError> {
    let found = state.db.lock().query_row(
        "SELECT id, classes FROM datasets WHERE name = ?1",
        [name],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
    );
    match found {
        Ok((id, classes)) => Ok((id, serde_json::from_str(&classes).map_err(ApiError::internal)?)),
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            Err(ApiError::not_found(format!("data set '{name}'")))
        }
        Err(other) => Err(other.into()),
    }
}

/// Data set `name` with its per-class image counts, or 404.
pub fn get_info(state: &AppState, name: &str) -> Result<DatasetInfo, ApiError> {
    let (id, classes) = find(state, name)?;
    let db = state.db.lock();
    let created: i64 =
        db.query_row("SELECT created FROM datasets WHERE id = ?1", [id], |r| r.get(0))?;
    let mut counts = Vec::with_capacity(classes.len());
    let mut statement =
        db.prepare("SELECT COUNT(*) FROM samples WHERE dataset_id = ?1 AND class = ?2")?;
    for class in classes {
        let images: u64 = statement.query_row(rusqlite::params![id, class], |r| r.get(0))?;
        counts.push(ClassCount { name: class, images });
    }
    let images = counts.iter().map(|c| c.images).sum();
    Ok(DatasetInfo { name: name.to_string(), classes: counts, images, created })
}

#[utoipa::path(post, path = "/api/v1/datasets", tag = "datasets", request_body = NewDataset,
    responses((status = 201, body = DatasetInfo), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    _: Access<Train>,
    State(state): State<AppState>,
    Json(request): Json<NewDataset>,
) -> Result<(StatusCode, axum::Json<DatasetInfo>), ApiError> {
    names::check("data set", &request.name)?;
    if request.classes.is_empty() || request.classes.len() > MAX_CLASSES {
        return Err(ApiError::invalid(format!("a data set needs 1 to {MAX_CLASSES} classes")));
    }
    for (i, class) in request.classes.iter().enumerate() {
        names::check("class", class)?;
        if request.classes[..i].contains(class) {
            return Err(ApiError::invalid(format!("class '{class}' is given twice")));
        }
    }
    let classes = serde_json::to_string(&request.classes).map_err(ApiError::internal)?;
    let inserted = state.db.lock().execute(
        "INSERT INTO datasets (name, classes, created) VALUES (?1, ?2, ?3)",
        rusqlite::params![request.name, classes, now()],
    );
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            return Err(ApiError::conflict(format!("data set '{}' exists already", request.name)))
        }
        other => other?,
    };
    Ok((StatusCode::CREATED, axum::Json(get_info(&state, &request.name)?)))
}

#[utoipa::path(get, path = "/api/v1/datasets", tag = "datasets",
    responses((status = 200, body = [DatasetInfo])))]
pub async fn list(
    _: Access<Read>,
    State(state): State<AppState>,
) -> Result<axum::Json<Vec<DatasetInfo>>, ApiError> {
    let names: Vec<String> = {
        let db = state.db.lock();
        let mut statement = db.prepare("SELECT name FROM datasets ORDER BY name")?;
        let rows = statement.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let infos = names.iter().map(|name| get_info(&state, name)).collect::<Result<_, _>>()?;
    Ok(axum::Json(infos))
}

#[utoipa::path(get, path = "/api/v1/datasets/{name}", tag = "datasets",
    responses((status = 200, body = DatasetDetail), (status = 404, body = ErrorBody)))]
pub async fn get(
    _: Access<Read>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<axum::Json<DatasetDetail>, ApiError> {
    let info = get_info(&state, &name)?;
    let (id, _) = find(&state, &name)?;
    let db = state.db.lock();
    let mut statement = db.prepare(
        "SELECT hash, class, name, bytes, width, height FROM samples WHERE dataset_id = ?1 ORDER BY id",
    )?;
    let samples = statement
        .query_map([id], |r| {
            Ok(Sample {
                hash: r.get(0)?,
                class: r.get(1)?,
                name: r.get(2)?,
                bytes: r.get(3)?,
                width: r.get(4)?,
                height: r.get(5)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(axum::Json(DatasetDetail { dataset: info, samples }))
}

#[utoipa::path(delete, path = "/api/v1/datasets/{name}", tag = "datasets",
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
) -> Result<StatusCode, ApiError> {
    let (id, _) = find(&state, &name)?;
    let orphans: Vec<(String, String)> = {
        let mut db = state.db.lock();
        let transaction = db.transaction()?;
        let busy: Vec<i64> = transaction
            .prepare("SELECT id FROM jobs WHERE dataset = ?1 AND status IN ('queued', 'running') ORDER BY id")?
            .query_map([&name], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if !busy.is_empty() {
            return Err(ApiError::conflict(format!(
                "data set '{name}' is used by job(s) {busy:?}: cancel them or wait for them to finish"
            )));
        }
        let orphans = transaction
            .prepare(
                "SELECT DISTINCT hash, ext FROM samples WHERE dataset_id = ?1 AND hash NOT IN \
                 (SELECT hash FROM samples WHERE dataset_id != ?1)",
            )?
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        transaction.execute("DELETE FROM datasets WHERE id = ?1", [id])?;
        transaction.commit()?;
        orphans
    };
    for (hash, ext) in orphans {
        let _ = std::fs::remove_file(state.layout.image(&hash, &ext));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// A checked image: its extension and header dimensions.
struct Checked {
    ext: &'static str,
    width: u32,
    height: u32,
}

/// Decodes the staged file at `path` as training would read it, with the service's limits;
/// errors name `name` (the uploaded file) rather than the staging path.
fn check_image(path: &Path, name: &str, bytes: &[u8]) -> Result<Checked, String> {
    let limits = image_limits();
    let renamed =
        |e: &dyn std::fmt::Display| e.to_string().replace(&path.display().to_string(), name);
    // Decoding at a 64-pixel shorter side is what a small model reads; big JPEGs are
    // decoded in the DCT domain, PNGs whole (within the pixel limit).
    sprout_data::decode_rgb(path, 64, &limits).map_err(|e| renamed(&e))?;
    let ext = if bytes.starts_with(b"\x89PNG") { "png" } else { "jpg" };
    let (width, height) = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| renamed(&e))?
        .into_dimensions()
        .map_err(|e| renamed(&e))?;
    Ok(Checked { ext, width, height })
}

/// Stores one uploaded file in data set `id`: checked, placed by hash, recorded.
fn add_file(
    state: &AppState,
    id: i64,
    classes: &[String],
    class: &str,
    name: &str,
    bytes: &[u8],
) -> Result<FileReport, ApiError> {
    if !classes.iter().any(|c| c == class) {
        let known = classes.join(", ");
        return Ok(rejected(
            name,
            class,
            &format!("unknown class '{class}' (the data set has {known})"),
        ));
    }
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Ok(rejected(
            name,
            class,
            &format!("over the limit of {MAX_IMAGE_BYTES} bytes for one image"),
        ));
    }
    let mut report = rejected(name, class, "");
    let hash = sha256(bytes);
    report.hash = Some(hash.clone());
    let existing: Option<String> = state
        .db
        .lock()
        .query_row(
            "SELECT class FROM samples WHERE dataset_id = ?1 AND hash = ?2",
            rusqlite::params![id, hash],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| {
            if matches!(e, rusqlite::Error::QueryReturnedNoRows) {
                Ok(None)
            } else {
                Err(e)
            }
        })?;
    if let Some(existing) = existing {
        report.status = "duplicate".into();
        report.detail = Some(format!("the same bytes are already in class '{existing}'"));
        return Ok(report);
    }
    let staged = Staged::write(&state.layout.tmp(), "upload", bytes)?;
    let checked = match check_image(&staged.path, name, bytes) {
        Ok(checked) => checked,
        Err(reason) => {
            report.detail = Some(reason);
            return Ok(report);
        }
    };
    staged.place(&state.layout.image(&hash, checked.ext))?;
    state.db.lock().execute(
        "INSERT INTO samples (dataset_id, class, hash, ext, name, bytes, width, height, created) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        rusqlite::params![
            id,
            class,
            hash,
            checked.ext,
            name,
            bytes.len() as u64,
            checked.width,
            checked.height,
            now()
        ],
    )?;
    report.status = "added".into();
    Ok(report)
}

/// The report of a file refused for `detail`.
fn rejected(name: &str, class: &str, detail: &str) -> FileReport {
    FileReport {
        name: name.to_string(),
        class: class.to_string(),
        status: "rejected".into(),
        hash: None,
        detail: Some(detail.to_string()),
    }
}

/// Adds the images of the zip archive `bytes` (uploaded as `archive`), each in a folder
/// named for its class (`healthy/IMG_1.jpg`, or `any/path/healthy/IMG_1.jpg`). Entries
/// are read one at a time, each at most [`MAX_IMAGE_BYTES`] and all together at most the
/// body limit, whatever their headers declare; names that climb out of the archive are
/// refused.
fn add_archive(
    state: &AppState,
    id: i64,
    classes: &[String],
    archive: &str,
    bytes: &[u8],
) -> Result<Vec<FileReport>, ApiError> {
    use std::io::Read;
    let mut zip = match zip::ZipArchive::new(std::io::Cursor::new(bytes)) {
        Ok(zip) => zip,
        Err(e) => {
            return Ok(vec![rejected(archive, "", &format!("not a readable zip archive: {e}"))])
        }
    };
    let (mut reports, mut total) = (Vec::new(), 0u64);
    for index in 0..zip.len() {
        let mut entry = match zip.by_index(index) {
            Ok(entry) => entry,
            Err(e) => {
                let shown = format!("{archive}#{index}");
                reports.push(rejected(&shown, "", &format!("unreadable entry: {e}")));
                continue;
            }
        };
        if entry.is_dir() {
            continue;
        }
        let inner = entry.name().map_or_else(|_| format!("#{index}"), |n| n.into_owned());
        let shown = format!("{archive}/{inner}");
        let Some(path) = entry.enclosed_name() else {
            reports.push(rejected(&shown, "", "a name that leaves the archive"));
            continue;
        };
        let parts: Vec<String> = path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let [.., class, _] = parts.as_slice() else {
            reports.push(rejected(&shown, "", "not in a class folder (CLASS/FILE)"));
            continue;
        };
        let mut image = Vec::new();
        let read = (&mut entry).take(MAX_IMAGE_BYTES + 1).read_to_end(&mut image);
        if let Err(e) = read {
            reports.push(rejected(&shown, class, &format!("cannot unpack: {e}")));
            continue;
        }
        total += image.len() as u64;
        if total > state.max_body_bytes as u64 {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{archive}: its files hold more than the {} bytes one request may",
                    state.max_body_bytes
                ),
            ));
        }
        reports.push(add_file(state, id, classes, class, &shown, &image)?);
    }
    Ok(reports)
}

#[utoipa::path(post, path = "/api/v1/datasets/{name}/images", tag = "datasets",
    request_body(content_type = "multipart/form-data", description = "One part per image: the field name is its class, the file name is kept; or a part with a .zip file of CLASS/FILE entries"),
    responses((status = 200, body = UploadReport), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn upload(
    _: Access<Train>,
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    mut multipart: Multipart,
) -> Result<axum::Json<UploadReport>, ApiError> {
    let (id, classes) = find(&state, &name)?;
    let mut files = Vec::new();
    while let Some(field) = multipart.next_field().await? {
        let class = field.name().unwrap_or_default().to_string();
        let file_name = field.file_name().unwrap_or_default().to_string();
        let bytes = field.bytes().await?;
        let (state, classes) = (state.clone(), classes.clone());
        let reports = tokio::task::spawn_blocking(move || {
            if file_name.is_empty() {
                let why = "a part without a file name: send each image as a file";
                return Ok(vec![rejected(&file_name, &class, why)]);
            }
            if file_name.to_ascii_lowercase().ends_with(".zip") {
                return add_archive(&state, id, &classes, &file_name, &bytes);
            }
            Ok(vec![add_file(&state, id, &classes, &class, &file_name, &bytes)?])
        })
        .await
        .map_err(ApiError::internal)??;
        files.extend(reports);
    }
    if files.is_empty() {
        return Err(ApiError::bad_request("the upload holds no files"));
    }
    let count = |status: &str| files.iter().filter(|f| f.status == status).count() as u64;
    Ok(axum::Json(UploadReport {
        added: count("added"),
        duplicates: count("duplicate"),
        rejected: count("rejected"),
        files,
    }))
}

/// The images of data set `name` as (class, file name, stored path): what a job's snapshot
/// links to.
pub fn image_paths(
    state: &AppState,
    name: &str,
) -> Result<Vec<(String, String, std::path::PathBuf)>, ApiError> {
    let (id, _) = find(state, name)?;
    let db = state.db.lock();
    let mut statement =
        db.prepare("SELECT class, hash, ext FROM samples WHERE dataset_id = ?1 ORDER BY id")?;
    let rows = statement.query_map([id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
    })?;
    let mut paths = Vec::new();
    for row in rows {
        let (class, hash, ext) = row?;
        let path = state.layout.image(&hash, &ext);
        paths.push((class, format!("{hash}.{ext}"), path));
    }
    Ok(paths)
}

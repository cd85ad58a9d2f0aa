//! `Dataset`: a folder-per-class image tree (PlantVillage layout, `ROOT/<class>/*.png|jpg|jpeg`)
//! read into class names and `(path, label)` samples, images decoded on demand.

use std::fs;
use std::path::{Path, PathBuf};

use crate::decode::decode_rgb;
use crate::error::DataError;
use crate::limits::Limits;
use crate::pixels::Image;

/// The image files of a data set and their labels. Labels index `classes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataset {
    pub root: PathBuf,
    pub classes: Vec<String>,
    /// Every image with its label, class by class, files in name order.
    pub samples: Vec<(PathBuf, usize)>,
}

impl Dataset {
    /// Reads `root`, one sub-folder per class, classes in alphabetical order. Give
    /// `ROOT/train` for a tree split into `train/` and `val/`.
    pub fn open(root: &Path) -> Result<Self, DataError> {
        let (folders, images) = entries(root)?;
        if let Some(image) = images.first() {
            return Err(layout(
                root,
                format!(
                    "image {} lies in the root; put each image in its class folder",
                    name(image)
                ),
            ));
        }
        if folders.is_empty() {
            return Err(layout(
                root,
                "no class folders (expected ROOT/<class>/*.png|jpg|jpeg)".into(),
            ));
        }
        let classes: Vec<String> = folders.iter().map(|f| name(f)).collect();
        Self::read(root, classes)
    }

    /// Reads `root` with the given classes, in the given (label) order; every class needs a
    /// folder, and other folders are ignored.
    pub fn open_with_classes(root: &Path, classes: &[impl AsRef<str>]) -> Result<Self, DataError> {
        let classes: Vec<String> = classes.iter().map(|c| c.as_ref().to_string()).collect();
        if classes.is_empty() {
            return Err(layout(root, "no classes given".into()));
        }
        for class in &classes {
            if !root.join(class).is_dir() {
                return Err(layout(&root.join(class), format!("no folder for class '{class}'")));
            }
        }
        Self::read(root, classes)
    }

    fn read(root: &Path, classes: Vec<String>) -> Result<Self, DataError> {
        let mut samples = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let folder = root.join(class);
            let (subfolders, images) = entries(&folder)?;
            if images.is_empty() {
                let hint = if subfolders.is_empty() {
                    ""
                } else {
                    "; it holds folders: give ROOT/train, not ROOT"
                };
                return Err(layout(
                    &folder,
                    format!("class folder holds no PNG/JPEG images{hint}"),
                ));
            }
            samples.extend(images.into_iter().map(|path| (path, label)));
        }
        Ok(Self { root: root.to_path_buf(), classes, samples })
    }

    /// Every PNG/JPEG image under `root` at any depth, sorted by path, each labelled 0 of
    /// the one class `images`: data without labels, e.g. for calibration. Only regular files
    /// count; links are not followed, hidden entries are skipped.
    pub fn unlabelled(root: &Path) -> Result<Self, DataError> {
        let mut images = Vec::new();
        let mut folders = vec![root.to_path_buf()];
        while let Some(folder) = folders.pop() {
            for entry in fs::read_dir(&folder).map_err(DataError::io(&folder))? {
                let entry = entry.map_err(DataError::io(&folder))?;
                let path = entry.path();
                let file_type = entry.file_type().map_err(DataError::io(&path))?;
                if name(&path).starts_with('.') {
                    continue;
                }
                if file_type.is_dir() {
                    folders.push(path);
                } else if file_type.is_file() && is_image(&path) {
                    images.push(path);
                }
            }
        }
        if images.is_empty() {
            return Err(layout(root, "no PNG/JPEG images at any depth".into()));
        }
        images.sort();
        let samples = images.into_iter().map(|path| (path, 0)).collect();
        Ok(Self { root: root.to_path_buf(), classes: vec!["images".into()], samples })
    }

    /// How many images there are.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no images (never, for an opened data set).
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Decodes sample `index` at full size into an RGB image (within the process's [`Limits`]).
    pub fn image(&self, index: usize) -> Result<Image, DataError> {
        let decoded = decode_rgb(&self.samples[index].0, 0, &Limits::current())?;
        Ok(Image::from_rgb8(decoded.width(), decoded.height(), decoded.as_raw()))
    }

    /// The samples at `indices` (in that order), with the same root and classes: a split.
    pub fn subset(&self, indices: &[usize]) -> Self {
        let samples = indices.iter().map(|&i| self.samples[i].clone()).collect();
        Self { root: self.root.clone(), classes: self.classes.clone(), samples }
    }
}

/// The visible sub-folders and the PNG/JPEG files of `folder`, each sorted by name.
fn entries(folder: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), DataError> {
    let mut folders = Vec::new();
    let mut images = Vec::new();
    for entry in fs::read_dir(folder).map_err(DataError::io(folder))? {
        let path = entry.map_err(DataError::io(folder))?.path();
        if name(&path).starts_with('.') {
            continue;
        }
        if path.is_dir() {
            folders.push(path);
        } else if is_image(&path) {
            images.push(path);
        }
    }
    folders.sort();
    images.sort();
    Ok((folders, images))
}

fn is_image(path: &Path) -> bool {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    ["png", "jpg", "jpeg"].iter().any(|known| extension.eq_ignore_ascii_case(known))
}

fn name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn layout(path: &Path, detail: String) -> DataError {
    DataError::Layout { path: path.to_path_buf(), detail }
}

//! What kind of file a path holds, told by its first bytes (by its extension for ONNX, which
//! has none of its own), so that a missing path says "not found" and a wrong file is named
//! for what it is instead of failing deep in a decoder.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use sprout_core::format::{bundle, device_checkpoint, host_checkpoint, MAGIC};

use crate::TrainError;

/// Bytes read to tell a file's kind.
const HEAD_BYTES: usize = 16;

/// The kinds of file sprout's tools read or are commonly given by mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Folder,
    Empty,
    Png,
    Jpeg,
    /// A zip archive with the `.npz` extension (numpy's `savez`).
    Npz,
    Zip,
    Npy,
    Safetensors,
    /// An ONNX model (protocol buffers have no magic bytes: told by the `.onnx` extension).
    Onnx,
    Model,
    HostCheckpoint,
    DeviceCheckpoint,
    Bundle,
    Elf,
    /// None of the above.
    Unknown,
}

impl FileKind {
    /// The kind of the file whose first bytes are `head` (at most [`HEAD_BYTES`] needed).
    pub fn of_bytes(path: &Path, head: &[u8]) -> FileKind {
        let magic: [(&[u8], FileKind); 10] = [
            (&MAGIC, FileKind::Model),
            (&host_checkpoint::MAGIC, FileKind::HostCheckpoint),
            (&device_checkpoint::FILE_FRAMING.magic, FileKind::DeviceCheckpoint),
            (&bundle::FRAMING.magic, FileKind::Bundle),
            (b"\x89PNG\r\n\x1a\n", FileKind::Png),
            (b"\xff\xd8\xff", FileKind::Jpeg),
            (b"\x93NUMPY", FileKind::Npy),
            (b"\x7fELF", FileKind::Elf),
            (b"PK\x03\x04", FileKind::Zip),
            (b"PK\x05\x06", FileKind::Zip),
        ];
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_lowercase();
        if head.is_empty() {
            return FileKind::Empty;
        }
        // A file shorter than its magic is a truncated file of that kind, for its decoder to
        // report as such.
        let matches = |m: &[u8]| head.starts_with(m) || m.starts_with(head);
        match magic.iter().find(|(m, _)| matches(m)) {
            Some((_, FileKind::Zip)) if extension == "npz" => FileKind::Npz,
            Some(&(_, kind)) => kind,
            // safetensors: a little-endian u64 header length, then the JSON header.
            None if head.len() > 8 && head[8] == b'{' => FileKind::Safetensors,
            None if extension == "onnx" => FileKind::Onnx,
            None => FileKind::Unknown,
        }
    }

    /// The kind of the file or folder at `path`; a missing path is [`TrainError::NotFound`].
    pub fn of_path(path: &Path) -> Result<FileKind, TrainError> {
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Ok(FileKind::Folder);
        }
        // A FIFO or a device is refused before it is opened: opening a FIFO waits for a writer.
        sprout_data::regular_file(path).map_err(|e| match e {
            sprout_data::DataError::Io { source, .. } if source.kind() == ErrorKind::NotFound => {
                TrainError::NotFound { path: path.to_path_buf() }
            }
            other => TrainError::from(other),
        })?;
        let mut file = File::open(path).map_err(TrainError::io(path))?;
        let mut head = Vec::with_capacity(HEAD_BYTES);
        file.by_ref()
            .take(HEAD_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(TrainError::io(path))?;
        Ok(FileKind::of_bytes(path, &head))
    }

    /// What the kind is, as in "model.png is a PNG image".
    pub fn description(self) -> &'static str {
        match self {
            FileKind::Folder => "a folder",
            FileKind::Empty => "an empty file",
            FileKind::Png => "a PNG image",
            FileKind::Jpeg => "a JPEG image",
            FileKind::Npz => "a numpy .npz archive",
            FileKind::Zip => "a zip archive",
            FileKind::Npy => "a numpy .npy array",
            FileKind::Safetensors => "a safetensors file",
            FileKind::Onnx => "an ONNX model",
            FileKind::Model => "a .sprout model",
            FileKind::HostCheckpoint => "a training checkpoint (.ckpt, for --resume)",
            FileKind::DeviceCheckpoint => "a device checkpoint (from `sprout device pull`)",
            FileKind::Bundle => "a device bundle (from `sprout bundle`)",
            FileKind::Elf => "an ELF executable",
            FileKind::Unknown => "a file of unknown kind",
        }
    }
}

/// Checks that `path` exists and holds one of the `expected` kinds (`what` names them for
/// the message, e.g. "a .sprout model"); returns the kind found. A file of unknown kind
/// passes when an expected kind has no magic bytes (ONNX), so its decoder can tell.
pub fn expect_kind(path: &Path, expected: &[FileKind], what: &str) -> Result<FileKind, TrainError> {
    let found = FileKind::of_path(path)?;
    let unknown_allowed = found == FileKind::Unknown && expected.contains(&FileKind::Onnx);
    if expected.contains(&found) || unknown_allowed {
        return Ok(found);
    }
    Err(TrainError::WrongKind {
        path: path.to_path_buf(),
        found: found.description(),
        expected: what.to_string(),
    })
}

/// Reads the file at `path` after checking that it is of the `expected` kind (see
/// [`expect_kind`]); a file over the memory limit is refused before it is read.
pub fn read_kind(path: &Path, expected: FileKind, what: &str) -> Result<Vec<u8>, TrainError> {
    expect_kind(path, &[expected], what)?;
    Ok(sprout_data::read_bounded(path, sprout_data::Limits::current().max_memory)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str, head: &[u8]) -> FileKind {
        FileKind::of_bytes(Path::new(name), head)
    }

    #[test]
    fn kinds_are_told_by_their_first_bytes() {
        assert_eq!(kind("a.sprout", b"\x89SPROUT\n\x02\x00"), FileKind::Model);
        assert_eq!(kind("a.sprout", b"\x89PNG\r\n\x1a\n...."), FileKind::Png);
        assert_eq!(kind("x", b"\xff\xd8\xff\xe0"), FileKind::Jpeg);
        assert_eq!(kind("x.ckpt", b"\x89SPRCKPT\x01\x00"), FileKind::HostCheckpoint);
        assert_eq!(kind("x", b"\x89SPRDCK\n\x01\x00"), FileKind::DeviceCheckpoint);
        assert_eq!(kind("x", b"\x89SPRBDL\n\x01\x00"), FileKind::Bundle);
        assert_eq!(kind("d.npz", b"PK\x03\x04...."), FileKind::Npz);
        assert_eq!(kind("d.zip", b"PK\x03\x04...."), FileKind::Zip);
        assert_eq!(kind("x.npy", b"\x93NUMPY\x01\x00"), FileKind::Npy);
        assert_eq!(kind("f.elf", b"\x7fELF\x01\x01\x01"), FileKind::Elf);
        assert_eq!(kind("d.bin", b"\x20\0\0\0\0\0\0\0{\"x\""), FileKind::Safetensors);
        assert_eq!(kind("m.onnx", b"\x08\x07\x12\x04"), FileKind::Onnx);
        assert_eq!(kind("m.bin", b"\x08\x07\x12\x04"), FileKind::Unknown);
        assert_eq!(kind("m.sprout", b""), FileKind::Empty);
        assert_eq!(kind("m.sprout", b"\x89SPR"), FileKind::Model, "a truncated model");
    }

    #[test]
    fn a_wrong_kind_is_named_and_a_missing_path_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("model.png");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR").unwrap();
        let error = read_kind(&png, FileKind::Model, "a .sprout model").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{} is a PNG image, not a .sprout model", png.display())
        );
        let missing = dir.path().join("nothere.sprout");
        let error = read_kind(&missing, FileKind::Model, "a .sprout model").unwrap_err();
        assert_eq!(error.to_string(), format!("not found: {}", missing.display()));
        assert_eq!(FileKind::of_path(dir.path()).unwrap(), FileKind::Folder);
        let onnx = dir.path().join("m.onnx");
        std::fs::write(&onnx, b"\x08\x07").unwrap();
        assert_eq!(expect_kind(&onnx, &[FileKind::Onnx], "an ONNX model").unwrap(), FileKind::Onnx);
    }
}

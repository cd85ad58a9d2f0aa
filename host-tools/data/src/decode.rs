//! Reading one PNG or JPEG file safely and cheaply: regular files only, reads bounded, the
//! declared size (pixels, and bytes after expansion to RGB) checked against the
//! [`Limits`] before any pixel is allocated, and big JPEGs decoded
//! at 1/2, 1/4 or 1/8 scale in the DCT domain when the picture wanted is much smaller.

use std::io::Cursor;
use std::path::Path;

use image::codecs::png::PngDecoder;
use image::{DynamicImage, ImageDecoder, RgbImage};

use crate::error::DataError;
use crate::limits::{read_bounded, Limits};
use crate::resize::{resize, ResizeMode};

/// Decodes `path` into RGB, scaled down in the DCT domain (JPEG only) as far as its shorter
/// side stays at least `min_side` pixels; `0` decodes at full size. The file must be a regular
/// file of at most `limits.max_file_bytes`, its header declaring at most `limits.max_pixels`.
pub fn decode_rgb(path: &Path, min_side: u32, limits: &Limits) -> Result<RgbImage, DataError> {
    decode_counted(path, min_side, limits).map(|(image, _)| image)
}

/// Reads `path` and resizes it to `width x height` the way `mode` says (decoding big JPEGs
/// at a reduced scale first): what the network sees before augmentation.
pub fn load_resized(
    path: &Path,
    width: u32,
    height: u32,
    mode: ResizeMode,
    limits: &Limits,
) -> Result<RgbImage, DataError> {
    load_counted(path, width, height, mode, limits).map(|(image, _)| image)
}

/// [`load_resized`], also returning the most bytes it held at once (file, decoded picture and
/// result), for the pipeline's accounting.
pub(crate) fn load_counted(
    path: &Path,
    width: u32,
    height: u32,
    mode: ResizeMode,
    limits: &Limits,
) -> Result<(RgbImage, usize), DataError> {
    // Twice the target on the shorter side keeps the final antialiased resize sharp.
    let (decoded, held) = decode_counted(path, 2 * width.max(height), limits)?;
    let resized = resize(&decoded, width, height, mode);
    let held = held.max(decoded.len() + resized.len());
    Ok((resized, held))
}

fn decode_counted(
    path: &Path,
    min_side: u32,
    limits: &Limits,
) -> Result<(RgbImage, usize), DataError> {
    let bytes = read_bounded(path, limits.max_file_bytes)?;
    let image = if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        decode_jpeg(path, &bytes, min_side, limits)?
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(path, &bytes, limits)?
    } else {
        return Err(decode_error(path, "not a PNG or JPEG file (unknown signature)"));
    };
    let held = bytes.len() + image.len();
    Ok((image, held))
}

fn decode_error(path: &Path, reason: impl Into<String>) -> DataError {
    DataError::Decode { path: path.to_path_buf(), reason: reason.into() }
}

/// Refuses an empty picture, one over the pixel limit, or one whose decoded bytes (the
/// decoder's `decoded_bytes`, then three bytes a pixel of RGB, held at once) exceed the
/// memory limit.
fn check_size(
    path: &Path,
    width: u32,
    height: u32,
    decoded_bytes: u64,
    limits: &Limits,
) -> Result<(), DataError> {
    let (width, height) = (u64::from(width), u64::from(height));
    if width == 0 || height == 0 {
        return Err(decode_error(path, format!("the header declares {width}x{height} pixels")));
    }
    if width * height > limits.max_pixels {
        let limit = limits.max_pixels;
        return Err(DataError::TooManyPixels { path: path.to_path_buf(), width, height, limit });
    }
    let what = format!("image {} ({width}x{height} decoded to RGB)", path.display());
    limits.check_memory(&what, decoded_bytes.saturating_add(width * height * 3))
}

/// A JPEG, at the smallest DCT scale (1/8, 1/4, 1/2 or 1) whose shorter side is at least
/// `min_side`.
fn decode_jpeg(
    path: &Path,
    bytes: &[u8],
    min_side: u32,
    limits: &Limits,
) -> Result<RgbImage, DataError> {
    let jpeg_error = |e: jpeg_decoder::Error| decode_error(path, e.to_string());
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder.read_info().map_err(jpeg_error)?;
    let info = decoder.info().ok_or_else(|| decode_error(path, "no JPEG frame header"))?;
    // The decoder's buffer is at most four bytes a pixel (CMYK).
    let (w, h) = (u32::from(info.width), u32::from(info.height));
    check_size(path, w, h, u64::from(w) * u64::from(h) * 4, limits)?;
    // The size of a side decoded at `eighths` / 8, as the decoder rounds it.
    let scaled = |side: u16, eighths: u32| (u32::from(side) * eighths).div_ceil(8);
    let eighths = [1, 2, 4]
        .into_iter()
        .filter(|_| min_side > 0)
        .find(|&e| scaled(info.width, e).min(scaled(info.height, e)) >= min_side)
        .unwrap_or(8);
    let (mut width, mut height) = (u32::from(info.width), u32::from(info.height));
    if eighths < 8 {
        let (w, h) = decoder
            .scale(scaled(info.width, eighths) as u16, scaled(info.height, eighths) as u16)
            .map_err(jpeg_error)?;
        (width, height) = (u32::from(w), u32::from(h));
    }
    decoder
        .set_max_decoding_buffer_size(usize::try_from(limits.max_pixels * 4).unwrap_or(usize::MAX));
    let pixels = decoder.decode().map_err(jpeg_error)?;
    use jpeg_decoder::PixelFormat;
    let rgb: Vec<u8> = match info.pixel_format {
        PixelFormat::RGB24 => pixels,
        PixelFormat::L8 => pixels.iter().flat_map(|&l| [l; 3]).collect(),
        PixelFormat::L16 => pixels
            .chunks_exact(2)
            .flat_map(|c| [(u16::from_ne_bytes([c[0], c[1]]) >> 8) as u8; 3])
            .collect(),
        // CMYK with ink as 0 (the decoder's output): each colour is (1 - c)(1 - k).
        PixelFormat::CMYK32 => pixels
            .chunks_exact(4)
            .flat_map(|p| {
                let k = 255 - u16::from(p[3]);
                [0, 1, 2].map(|c| ((255 - u16::from(p[c])) * k / 255) as u8)
            })
            .collect(),
    };
    RgbImage::from_raw(width, height, rgb)
        .ok_or_else(|| decode_error(path, format!("decoded data does not fill {width}x{height}")))
}

/// A PNG, at full size.
fn decode_png(path: &Path, bytes: &[u8], limits: &Limits) -> Result<RgbImage, DataError> {
    let png_error = |e: image::ImageError| decode_error(path, e.to_string());
    let decoder = PngDecoder::new(Cursor::new(bytes)).map_err(png_error)?;
    let (width, height) = decoder.dimensions();
    check_size(path, width, height, decoder.total_bytes(), limits)?;
    Ok(DynamicImage::from_decoder(decoder).map_err(png_error)?.into_rgb8())
}

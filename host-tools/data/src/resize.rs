//! Antialiased resizing of 8-bit RGB pictures to a network's input size: resize-then-centre-crop
//! (torchvision's `Resize` + `CenterCrop`) or squash, through a separable triangle filter that
//! widens with the shrink factor (PIL's bilinear, torchvision's `antialias=True`).

use image::RgbImage;

/// How a picture of another aspect ratio becomes the target's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// Scale so that the picture covers the target (the shorter side to the target's for a
    /// square), keeping the aspect ratio, then cut out the centre.
    #[default]
    Crop,
    /// Scale each side to the target's, distorting the aspect ratio.
    Squash,
}

impl ResizeMode {
    /// `crop` or `squash`.
    pub fn name(self) -> &'static str {
        match self {
            ResizeMode::Crop => "crop",
            ResizeMode::Squash => "squash",
        }
    }
}

/// Resizes `image` to `width x height` the way `mode` says.
pub fn resize(image: &RgbImage, width: u32, height: u32, mode: ResizeMode) -> RgbImage {
    let (w, h) = image.dimensions();
    let (columns, rows) = match mode {
        ResizeMode::Squash => (taps(w, width, 0, width), taps(h, height, 0, height)),
        ResizeMode::Crop => {
            // The scaled size before the crop, its longer side truncated as torchvision does.
            let (cover_w, cover_h) =
                if u64::from(width) * u64::from(h) >= u64::from(height) * u64::from(w) {
                    (width, (u64::from(h) * u64::from(width) / u64::from(w)).max(1) as u32)
                } else {
                    ((u64::from(w) * u64::from(height) / u64::from(h)).max(1) as u32, height)
                };
            let (cover_w, cover_h) = (cover_w.max(width), cover_h.max(height));
            let left = ((cover_w - width) as f64 / 2.0).round() as u32;
            let top = ((cover_h - height) as f64 / 2.0).round() as u32;
            (taps(w, cover_w, left, width), taps(h, cover_h, top, height))
        }
    };
    // Horizontal pass over every source row, then vertical into bytes.
    let source = image.as_raw();
    let row_bytes = 3 * w as usize;
    let mut wide = vec![0f32; h as usize * 3 * width as usize];
    for (y, out) in wide.chunks_exact_mut(3 * width as usize).enumerate() {
        let row = &source[y * row_bytes..(y + 1) * row_bytes];
        for (tap, pixel) in columns.iter().zip(out.chunks_exact_mut(3)) {
            for (k, weight) in tap.weights.iter().enumerate() {
                let at = 3 * (tap.start + k);
                for c in 0..3 {
                    pixel[c] += weight * f32::from(row[at + c]);
                }
            }
        }
    }
    let stride = 3 * width as usize;
    let mut out = vec![0u8; height as usize * stride];
    for (tap, row) in rows.iter().zip(out.chunks_exact_mut(stride)) {
        let mut sum = vec![0f32; stride];
        for (k, weight) in tap.weights.iter().enumerate() {
            let from = &wide[(tap.start + k) * stride..(tap.start + k + 1) * stride];
            for (s, v) in sum.iter_mut().zip(from) {
                *s += weight * v;
            }
        }
        for (o, s) in row.iter_mut().zip(&sum) {
            *o = s.round().clamp(0.0, 255.0) as u8;
        }
    }
    RgbImage::from_raw(width, height, out).expect("the buffer holds width x height pixels")
}

/// The source pixels and weights of one output pixel along one axis.
struct Tap {
    start: usize,
    weights: Vec<f32>,
}

/// The taps of outputs `first..first + count` when `from` pixels become `to`: a triangle
/// filter of radius 1 output pixel (so at least 1 source pixel), centred on each output
/// pixel's centre, its weights summing to 1.
fn taps(from: u32, to: u32, first: u32, count: u32) -> Vec<Tap> {
    let scale = f64::from(from) / f64::from(to);
    let support = scale.max(1.0);
    (first..first + count)
        .map(|i| {
            let centre = (f64::from(i) + 0.5) * scale;
            let start = (centre - support + 0.5).floor().max(0.0) as usize;
            let end = ((centre + support + 0.5).floor() as usize).min(from as usize).max(start + 1);
            let raw: Vec<f64> = (start..end)
                .map(|x| (1.0 - ((x as f64 + 0.5 - centre) / support).abs()).max(0.0))
                .collect();
            let total: f64 = raw.iter().sum();
            let weights = if total > 0.0 {
                raw.iter().map(|w| (w / total) as f32).collect()
            } else {
                // Every weight is 0 only at an edge: take the nearest pixel.
                let mut one = vec![0.0; raw.len()];
                one[0] = 1.0;
                one
            };
            Tap { start, weights }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> RgbImage {
        RgbImage::from_fn(width, height, |x, y| image::Rgb(pixel(x, y)))
    }

    #[test]
    fn a_constant_picture_stays_constant_at_any_size_and_mode() {
        let constant = picture(37, 23, |_, _| [20, 150, 230]);
        for (w, h) in [(64, 64), (8, 5), (37, 23), (1, 1)] {
            for mode in [ResizeMode::Crop, ResizeMode::Squash] {
                let resized = resize(&constant, w, h, mode);
                assert_eq!(resized.dimensions(), (w, h));
                assert!(resized.pixels().all(|p| p.0 == [20, 150, 230]), "{w}x{h} {mode:?}");
            }
        }
    }

    #[test]
    fn halving_averages_pairs_and_a_ramp_stays_monotone() {
        let pair = picture(2, 1, |x, _| if x == 0 { [0, 0, 0] } else { [200, 100, 50] });
        assert_eq!(resize(&pair, 1, 1, ResizeMode::Squash).as_raw(), &[100, 50, 25]);
        let ramp = picture(10, 10, |x, _| [(x * 25) as u8, 0, 0]);
        let wide = resize(&ramp, 25, 4, ResizeMode::Squash);
        let row: Vec<u8> = (0..25).map(|x| wide.get_pixel(x, 2).0[0]).collect();
        assert!(row.windows(2).all(|w| w[0] <= w[1]), "{row:?}");
    }

    #[test]
    fn shrinking_a_fine_checkerboard_gives_mid_grey_not_aliasing() {
        // One-pixel squares, shrunk 7.3 times: a filter that only looks at the nearest 2x2
        // pixels gives black or white; an antialiased one averages to grey.
        let board =
            picture(512, 512, |x, y| if (x + y).is_multiple_of(2) { [255; 3] } else { [0; 3] });
        for mode in [ResizeMode::Crop, ResizeMode::Squash] {
            let small = resize(&board, 70, 70, mode);
            for p in small.pixels() {
                assert!((118..=137).contains(&p.0[0]), "{mode:?}: {:?}", p.0);
            }
        }
    }

    #[test]
    fn crop_cuts_the_sides_of_a_wide_picture_and_squash_keeps_them() {
        // 300x100: the left third red, the rest blue.
        let wide = picture(300, 100, |x, _| if x < 100 { [255, 0, 0] } else { [0, 0, 255] });
        let crop = resize(&wide, 20, 20, ResizeMode::Crop);
        let squash = resize(&wide, 20, 20, ResizeMode::Squash);
        // Crop keeps the middle 100 columns: blue, with a trace of red at the very edge from
        // the filter's reach (as when torchvision resizes, then crops).
        assert!(crop.pixels().all(|p| p.0[0] < 40 && p.0[2] > 215), "{:?}", crop.as_raw());
        let red_total: u32 = crop.pixels().map(|p| u32::from(p.0[0])).sum();
        assert!(red_total < 400 * 5, "{red_total}");
        // Squash keeps the red third: about a third of the columns.
        let red = (0..20).filter(|&x| squash.get_pixel(x, 10).0[0] > 128).count();
        assert!((6..=7).contains(&red), "{red} red columns");
        // A tall picture is cropped top and bottom.
        let tall = picture(50, 150, |_, y| if y < 50 { [255, 0, 0] } else { [0, 255, 0] });
        let cut = resize(&tall, 10, 10, ResizeMode::Crop);
        assert!(cut.pixels().all(|p| p.0[0] < 40 && p.0[1] > 215), "{:?}", cut.as_raw());
    }
}

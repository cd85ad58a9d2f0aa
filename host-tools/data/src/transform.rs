//! Image transforms, from a resized picture to a network input: horizontal flip, seeded colour
//! jitter, and per-channel normalisation into CHW `f32`.

use image::RgbImage;

use crate::pixels::{mix, Image, Rgb};
use crate::rng::Rng;

/// Mirrors left and right, in place.
pub fn flip_horizontal(image: &mut Image) {
    for row in image.pixels.chunks_exact_mut(image.width as usize) {
        row.reverse();
    }
}

/// Random colour changes, each drawn uniformly from `[1 - x, 1 + x]` (torchvision's
/// `ColorJitter` without hue).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter {
    pub brightness: f32,
    pub contrast: f32,
    pub saturation: f32,
}

impl Jitter {
    /// Applies one random draw to `image`, in place.
    pub fn apply(&self, image: &mut Image, rng: &mut Rng) {
        let brightness = rng.range(1.0 - self.brightness, 1.0 + self.brightness);
        let contrast = rng.range(1.0 - self.contrast, 1.0 + self.contrast);
        let saturation = rng.range(1.0 - self.saturation, 1.0 + self.saturation);
        let grey_mean = luma(image.mean()) * brightness;
        for p in &mut image.pixels {
            let c = p.map(|c| (c * brightness).clamp(0.0, 1.0));
            let c = mix([grey_mean; 3], c, contrast).map(|c| c.clamp(0.0, 1.0));
            *p = mix([luma(c); 3], c, saturation).map(|c| c.clamp(0.0, 1.0));
        }
    }
}

/// ITU-R 601 luma, as PIL's greyscale conversion.
fn luma(p: Rgb) -> f32 {
    0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]
}

/// Per-channel `(x - mean) / std`, for pixels in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub mean: Rgb,
    pub std: Rgb,
}

impl Normalize {
    /// ImageNet's statistics, what torchvision backbones expect.
    pub const IMAGENET: Normalize =
        Normalize { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] };

    /// Appends `image` normalised, channel-major (`[3, height, width]`), to `out`.
    pub fn to_chw(&self, image: &Image, out: &mut Vec<f32>) {
        for c in 0..3 {
            out.extend(image.pixels.iter().map(|p| (p[c] - self.mean[c]) / self.std[c]));
        }
    }
}

/// The steps from a picture resized to `size x size` (see [`crate::resize`]) to a network
/// input of `[3, size, size]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    pub size: u32,
    /// Mirror half of the images at random.
    pub flip: bool,
    pub jitter: Option<Jitter>,
    pub normalize: Normalize,
}

impl Transform {
    /// Resize and normalise only: for validation and inference.
    pub fn eval(size: u32) -> Self {
        Self { size, flip: false, jitter: None, normalize: Normalize::IMAGENET }
    }

    /// With random flips and a mild colour jitter: for training.
    pub fn train(size: u32) -> Self {
        let jitter = Jitter { brightness: 0.2, contrast: 0.2, saturation: 0.2 };
        Self { flip: true, jitter: Some(jitter), ..Self::eval(size) }
    }

    /// Transforms `resized` (`size x size`), drawing any randomness from `rng`, and appends it
    /// to `out` in CHW.
    pub fn apply(&self, resized: &RgbImage, rng: &mut Rng, out: &mut Vec<f32>) {
        debug_assert_eq!(resized.dimensions(), (self.size, self.size));
        let mut image = Image::from_rgb8(resized.width(), resized.height(), resized.as_raw());
        if self.flip && rng.chance(0.5) {
            flip_horizontal(&mut image);
        }
        if let Some(jitter) = &self.jitter {
            jitter.apply(&mut image, rng);
        }
        self.normalize.to_chw(&image, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: u32, height: u32) -> Image {
        let pixels = (0..width * height)
            .map(|i| [(i % width) as f32 / width as f32, (i / width) as f32 / height as f32, 0.5])
            .collect();
        Image { width, height, pixels }
    }

    #[test]
    fn flipping_twice_is_the_identity_and_once_mirrors() {
        let original = gradient(5, 3);
        let mut image = original.clone();
        flip_horizontal(&mut image);
        assert_eq!(image.at(0, 1), original.at(4, 1));
        assert_ne!(image, original);
        flip_horizontal(&mut image);
        assert_eq!(image, original);
    }

    #[test]
    fn normalising_a_constant_image_gives_the_expected_values() {
        let normalize = Normalize { mean: [0.5, 0.25, 0.0], std: [0.5, 0.25, 2.0] };
        let mut out = vec![7.0];
        normalize.to_chw(&Image::filled(2, 3, [1.0, 0.5, 1.0]), &mut out);
        assert_eq!(out.len(), 1 + 3 * 6);
        assert_eq!(&out[1..7], &[1.0; 6]);
        assert_eq!(&out[7..13], &[1.0; 6]);
        assert_eq!(&out[13..19], &[0.5; 6]);
    }

    #[test]
    fn jitter_is_seeded_bounded_and_off_when_zero() {
        let original = gradient(8, 8);
        let jitter = Jitter { brightness: 0.3, contrast: 0.3, saturation: 0.3 };
        let (mut a, mut b) = (original.clone(), original.clone());
        jitter.apply(&mut a, &mut Rng::new(4));
        jitter.apply(&mut b, &mut Rng::new(4));
        assert_eq!(a, b);
        assert_ne!(a, original);
        assert!(a.pixels.iter().flatten().all(|c| (0.0..=1.0).contains(c)));
        let mut unchanged = original.clone();
        Jitter { brightness: 0.0, contrast: 0.0, saturation: 0.0 }
            .apply(&mut unchanged, &mut Rng::new(4));
        for (p, q) in unchanged.pixels.iter().zip(&original.pixels) {
            assert!((0..3).all(|c| (p[c] - q[c]).abs() < 1e-6));
        }
    }

    #[test]
    fn the_eval_transform_normalises_without_randomness() {
        let transform = Transform {
            normalize: Normalize { mean: [0.5; 3], std: [0.5; 3] },
            ..Transform::eval(4)
        };
        let mut out = Vec::new();
        let picture = RgbImage::from_pixel(4, 4, image::Rgb([255, 0, 0]));
        transform.apply(&picture, &mut Rng::new(0), &mut out);
        assert_eq!(out, [[1.0f32; 16], [-1.0; 16], [-1.0; 16]].concat());
    }
}

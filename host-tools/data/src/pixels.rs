//! `Image`: an RGB picture as `f32` channels in `[0, 1]`, row-major, the one pixel type the
//! generator draws into, the loader decodes into and the transforms work on.

/// One pixel: red, green, blue in `[0, 1]`.
pub type Rgb = [f32; 3];

/// An RGB picture, `width * height` pixels, row by row from the top left.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<Rgb>,
}

impl Image {
    /// A `width x height` picture of one colour.
    pub fn filled(width: u32, height: u32, colour: Rgb) -> Self {
        Self { width, height, pixels: vec![colour; width as usize * height as usize] }
    }

    /// From 8-bit interleaved RGB bytes (`3 * width * height` of them).
    pub fn from_rgb8(width: u32, height: u32, bytes: &[u8]) -> Self {
        let pixels = bytes
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]].map(|c| f32::from(c) / 255.0))
            .collect();
        Self { width, height, pixels }
    }

    /// To 8-bit interleaved RGB bytes, clamping and rounding each channel.
    pub fn to_rgb8(&self) -> Vec<u8> {
        self.pixels
            .iter()
            .flat_map(|p| p.map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8))
            .collect()
    }

    /// The pixel at column `x`, row `y`.
    pub fn at(&self, x: u32, y: u32) -> Rgb {
        self.pixels[(y * self.width + x) as usize]
    }

    /// Each channel's mean over the picture.
    pub fn mean(&self) -> Rgb {
        let mut sum = [0.0f64; 3];
        for p in &self.pixels {
            for (s, c) in sum.iter_mut().zip(p) {
                *s += f64::from(*c);
            }
        }
        sum.map(|s| (s / self.pixels.len().max(1) as f64) as f32)
    }
}

/// `a` moved towards `b` by `t` (0: `a`, 1: `b`).
pub(crate) fn mix(a: Rgb, b: Rgb, t: f32) -> Rgb {
    [0, 1, 2].map(|i| a[i] + (b[i] - a[i]) * t)
}

/// Each channel of `a` times `k`.
pub(crate) fn scale(a: Rgb, k: f32) -> Rgb {
    a.map(|c| c * k)
}

#[cfg(test)]
mod tests {
    use super::{mix, Image};

    #[test]
    fn bytes_round_trip_and_mix_interpolates() {
        let bytes: Vec<u8> = (0..12).map(|i| i * 20).collect();
        let image = Image::from_rgb8(2, 2, &bytes);
        assert_eq!(image.to_rgb8(), bytes);
        assert_eq!(image.at(1, 0), [60.0 / 255.0, 80.0 / 255.0, 100.0 / 255.0]);
        assert_eq!(mix([0.0, 1.0, 0.5], [1.0, 0.0, 0.5], 0.25), [0.25, 0.75, 0.5]);
    }
}

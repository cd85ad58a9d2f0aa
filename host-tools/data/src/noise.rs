//! `ValueNoise`: smooth random fields on the unit square (a grid of random values, smoothly
//! interpolated), for soil grain, leaf texture, mildew patches and mosaic mottling.

use crate::rng::Rng;

/// Random values on a `(cells + 1)²` grid, interpolated with smoothstep weights.
pub(crate) struct ValueNoise {
    cells: usize,
    values: Vec<f32>,
}

impl ValueNoise {
    /// A field with `cells` grid cells per side (more cells: finer detail), values in `[0, 1)`.
    pub(crate) fn new(rng: &mut Rng, cells: usize) -> Self {
        let values = (0..(cells + 1) * (cells + 1)).map(|_| rng.unit()).collect();
        Self { cells, values }
    }

    /// The field at `(x, y)`, clamped to the unit square.
    pub(crate) fn at(&self, x: f32, y: f32) -> f32 {
        let scale = self.cells as f32;
        let (gx, gy) = (x.clamp(0.0, 1.0) * scale, y.clamp(0.0, 1.0) * scale);
        let (ix, iy) = ((gx as usize).min(self.cells - 1), (gy as usize).min(self.cells - 1));
        let (fx, fy) = (smoothstep(gx - ix as f32), smoothstep(gy - iy as f32));
        let row = self.cells + 1;
        let value = |i: usize, j: usize| self.values[(iy + j) * row + ix + i];
        let top = value(0, 0) + (value(1, 0) - value(0, 0)) * fx;
        let bottom = value(0, 1) + (value(1, 1) - value(0, 1)) * fx;
        top + (bottom - top) * fy
    }
}

/// `3t² - 2t³`: 0 at 0, 1 at 1, flat at both ends.
pub(crate) fn smoothstep(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

#[cfg(test)]
mod tests {
    use super::ValueNoise;
    use crate::rng::Rng;

    #[test]
    fn noise_hits_its_grid_values_and_stays_in_range() {
        let noise = ValueNoise::new(&mut Rng::new(5), 4);
        assert_eq!(noise.at(0.0, 0.0), noise.values[0]);
        assert_eq!(noise.at(1.0, 1.0), *noise.values.last().unwrap());
        for i in 0..=20 {
            let v = noise.at(i as f32 / 20.0, 0.37);
            assert!((0.0..1.0).contains(&v), "{v}");
        }
    }
}

//! The synthetic leaf data set: seeded scenes of one leaf on a background, with a disease
//! pattern per class and a source/target domain shift, written as PNG train/val folders.

use std::fmt;
use std::fs;
use std::path::Path;
use std::str::FromStr;

use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};

use crate::error::DataError;
use crate::files::write_replaceable;
use crate::noise::{smoothstep, ValueNoise};
use crate::pixels::{mix, scale, Image, Rgb};
use crate::rng::{fnv1a, Rng};

/// Which look the scenes have. The source domain has more classes (to pretrain a backbone on)
/// and a broad look (every leaf shape and shade, soil, wood and field backgrounds), as a large
/// pretraining corpus would; the target domain has the three field classes and narrow,
/// yellower leaves on grass or grey benches. The soil domain is a narrow source: the
/// source's classes, but only broad dark leaves on brown soil and wood, none of the field's
/// looks (a backbone pretrained on it leaves a new head far from the target).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Domain {
    #[default]
    Source,
    Target,
    Soil,
}

impl Domain {
    /// The classes this domain can draw.
    pub fn diseases(self) -> &'static [Disease] {
        use Disease::*;
        match self {
            Domain::Source | Domain::Soil => {
                &[Healthy, LeafSpot, Rust, PowderyMildew, Blight, Mosaic, Scorch]
            }
            Domain::Target => &[Healthy, LeafSpot, Rust],
        }
    }

    /// The class named `name`, or an error listing this domain's classes.
    pub fn disease(self, name: &str) -> Result<Disease, DataError> {
        let known = self.diseases();
        known.iter().copied().find(|d| d.name() == name).ok_or_else(|| DataError::UnknownClass {
            class: name.to_string(),
            domain: self.to_string(),
            known: known.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
        })
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Domain::Source => "source",
            Domain::Target => "target",
            Domain::Soil => "soil",
        })
    }
}

impl FromStr for Domain {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "source" => Ok(Domain::Source),
            "target" => Ok(Domain::Target),
            "soil" => Ok(Domain::Soil),
            _ => Err(format!("unknown domain '{s}' (known: source, target, soil)")),
        }
    }
}

/// A class the generator draws: what the leaf suffers from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disease {
    /// Clean green, a little texture.
    Healthy,
    /// A few brown round spots with yellow halos.
    LeafSpot,
    /// Many small orange pustules in clusters.
    Rust,
    /// White dusty patches.
    PowderyMildew,
    /// Large dark necrotic regions growing in from the edge.
    Blight,
    /// Mottled light and dark green patches.
    Mosaic,
    /// Brown, dried leaf margins.
    Scorch,
}

impl Disease {
    /// The class name, as folder names and model metadata spell it.
    pub fn name(self) -> &'static str {
        match self {
            Disease::Healthy => "healthy",
            Disease::LeafSpot => "leaf_spot",
            Disease::Rust => "rust",
            Disease::PowderyMildew => "powdery_mildew",
            Disease::Blight => "blight",
            Disease::Mosaic => "mosaic",
            Disease::Scorch => "scorch",
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct LeafConfig {
    /// Class names, in label order; each must be one of the domain's classes.
    pub classes: Vec<String>,
    /// Images per class, train and validation together.
    pub per_class: usize,
    /// Width and height of each image in pixels.
    pub size: u32,
    /// The seed every image is derived from.
    pub seed: u64,
    pub domain: Domain,
    /// The share of each class's images written to `val/` (rounded to whole images).
    pub val_fraction: f32,
}

impl Default for LeafConfig {
    /// LeafNet's three classes, 100 images each at 64x64, seed 0, source domain, 20% validation.
    fn default() -> Self {
        Self {
            classes: ["healthy", "leaf_spot", "rust"].map(String::from).to_vec(),
            per_class: 100,
            size: 64,
            seed: 0,
            domain: Domain::Source,
            val_fraction: 0.2,
        }
    }
}

/// The smallest image side the scenes stay recognisable at.
const MIN_SIZE: u32 = 16;
/// The largest image side (keeps one image's buffer bounded).
const MAX_SIZE: u32 = 4096;

impl LeafConfig {
    /// The validated classes, and how many of each go to train and to val.
    fn plan(&self) -> Result<(Vec<Disease>, usize, usize), DataError> {
        let invalid = |what: String| Err(DataError::Config(what));
        if self.classes.is_empty() {
            return invalid("no classes given".into());
        }
        if self.per_class == 0 {
            return invalid("per_class must be at least 1".into());
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            return invalid(format!("size {} is outside {MIN_SIZE}..={MAX_SIZE}", self.size));
        }
        if !(0.0..1.0).contains(&self.val_fraction) {
            return invalid(format!("val_fraction {} is outside [0, 1)", self.val_fraction));
        }
        let mut diseases = Vec::with_capacity(self.classes.len());
        for (i, class) in self.classes.iter().enumerate() {
            if self.classes[..i].contains(class) {
                return invalid(format!("class '{class}' is given twice"));
            }
            diseases.push(self.domain.disease(class)?);
        }
        let val = (self.per_class as f32 * self.val_fraction).round() as usize;
        let val = val.min(self.per_class - 1);
        Ok((diseases, self.per_class - val, val))
    }
}

/// What [`generate`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Class names in label order.
    pub classes: Vec<String>,
    /// Training images per class (the same for every class).
    pub train_per_class: usize,
    /// Validation images per class.
    pub val_per_class: usize,
    /// Bytes of PNG written in all.
    pub bytes: u64,
}

impl Summary {
    /// Images written in all.
    pub fn images(&self) -> usize {
        self.classes.len() * (self.train_per_class + self.val_per_class)
    }
}

/// Writes `OUT/train/<class>/NNNNN.png` and `OUT/val/<class>/NNNNN.png` for `config`, calling
/// `progress(done, total)` after each image. Same config, same bytes. Each file is written
/// under a temporary name and renamed, so a failure never leaves a truncated image behind.
pub fn generate(
    config: &LeafConfig,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<Summary, DataError> {
    let (diseases, train, val) = config.plan()?;
    let total = diseases.len() * config.per_class;
    let mut bytes = 0;
    let mut done = 0;
    for (class, &disease) in config.classes.iter().zip(&diseases) {
        let folders = [out.join("train").join(class), out.join("val").join(class)];
        for folder in &folders {
            fs::create_dir_all(folder).map_err(DataError::io(folder))?;
        }
        // Each class has its own seed stream, so adding a class leaves the others unchanged.
        let class_seed = Rng::derive(config.seed, fnv1a(class.as_bytes())).next_u64();
        for index in 0..config.per_class {
            let mut rng = Rng::derive(class_seed, index as u64);
            let image = Scene::random(&mut rng, config.domain, disease).render(config.size);
            let (folder, number) =
                if index < train { (&folders[0], index) } else { (&folders[1], index - train) };
            bytes += write_png(&image, &folder.join(format!("{number:05}.png")))?;
            done += 1;
            progress(done, total);
        }
    }
    Ok(Summary {
        classes: config.classes.clone(),
        train_per_class: train,
        val_per_class: val,
        bytes,
    })
}

/// Encodes `image` as PNG into `path` through a temporary file; returns the bytes written.
fn write_png(image: &Image, path: &Path) -> Result<u64, DataError> {
    let mut png = Vec::new();
    PngEncoder::new(&mut png)
        .write_image(&image.to_rgb8(), image.width, image.height, ExtendedColorType::Rgb8)
        .map_err(|e| DataError::Encode { path: path.to_path_buf(), reason: e.to_string() })?;
    write_replaceable(path, &png).map_err(DataError::io(path))?;
    Ok(png.len() as u64)
}

/// A point of the leaf in its own frame, in units of half the leaf's length: `u` across
/// (0 on the midrib), `v` along (-1 at the petiole, 1 at the tip).
#[derive(Clone, Copy)]
struct LeafPoint {
    u: f32,
    v: f32,
    /// Distance from the midrib as a share of the half-width there (1 on the margin).
    across: f32,
}

/// The leaf outline and where it lies in the frame.
struct Leaf {
    centre: [f32; 2],
    /// Half the leaf's length, as a share of the frame.
    half_length: f32,
    cos: f32,
    sin: f32,
    /// Widest half-width over half-length.
    width: f32,
    /// Where along the leaf (0 base, 1 tip) it is widest.
    widest: f32,
    petiole: f32,
    colour: Rgb,
    vein_colour: Rgb,
    /// Positions (in `v`) where the side veins leave the midrib, and their slope.
    veins: Vec<f32>,
    vein_slope: f32,
    texture: ValueNoise,
}

impl Leaf {
    fn random(rng: &mut Rng, domain: Domain) -> Self {
        let (width, widest, colour) = match domain {
            // A broad pretraining corpus: every leaf shape and shade, the field's included.
            Domain::Source => (
                rng.range(0.2, 0.65),
                rng.range(0.35, 0.6),
                [rng.range(0.18, 0.5), rng.range(0.42, 0.7), rng.range(0.1, 0.28)],
            ),
            // Broad, dark green leaves only.
            Domain::Soil => (
                rng.range(0.45, 0.65),
                rng.range(0.35, 0.5),
                [rng.range(0.18, 0.3), rng.range(0.42, 0.55), rng.range(0.1, 0.18)],
            ),
            Domain::Target => (
                rng.range(0.2, 0.32),
                rng.range(0.45, 0.6),
                [rng.range(0.38, 0.5), rng.range(0.58, 0.7), rng.range(0.18, 0.28)],
            ),
        };
        let half_length = rng.range(0.5, 0.9) / 2.0;
        let angle = rng.range(0.0, std::f32::consts::TAU);
        let slack = 0.5 - half_length * 0.8;
        let centre = [0.5 + rng.range(-slack, slack), 0.5 + rng.range(-slack, slack)];
        let pairs = 4 + rng.below(4);
        let veins: Vec<f32> = (0..pairs)
            .map(|k| -0.8 + 1.5 * (k as f32 + rng.range(0.2, 0.8)) / pairs as f32)
            .collect();
        Self {
            centre,
            half_length,
            cos: angle.cos(),
            sin: angle.sin(),
            width,
            widest,
            petiole: rng.range(0.12, 0.3),
            colour,
            vein_colour: scale(colour, rng.range(0.6, 0.75)),
            veins,
            vein_slope: rng.range(0.6, 1.2),
            texture: ValueNoise::new(rng, 8),
        }
    }

    /// Frame coordinates to the leaf's frame.
    fn local(&self, x: f32, y: f32) -> (f32, f32) {
        let (dx, dy) = (x - self.centre[0], y - self.centre[1]);
        (
            (dx * self.cos + dy * self.sin) / self.half_length,
            (dy * self.cos - dx * self.sin) / self.half_length,
        )
    }

    /// Half-width at `v`: a teardrop, zero at both ends, `width` at its widest.
    fn half_width(&self, v: f32) -> f32 {
        let t = (v + 1.0) / 2.0;
        if !(0.0..=1.0).contains(&t) {
            return 0.0;
        }
        // t^a (1 - t) peaks at t = a / (a + 1) = widest.
        let a = self.widest / (1.0 - self.widest);
        let peak = self.widest.powf(a) * (1.0 - self.widest);
        self.width * (t.powf(a) * (1.0 - t) / peak).sqrt()
    }

    /// How much of a pixel of `pixel` frame units around `(u, v)` the blade covers, with edges
    /// softened over `soft` pixels.
    fn coverage(&self, u: f32, v: f32, pixel: f32, soft: f32) -> f32 {
        let outside = (u.abs() - self.half_width(v)).max(v.abs() - 1.0) * self.half_length / pixel;
        (0.5 - outside / soft).clamp(0.0, 1.0)
    }

    /// How much of the pixel the petiole (a stalk beyond the base along the midrib) covers.
    fn petiole_coverage(&self, u: f32, v: f32, pixel: f32) -> f32 {
        let along = v.clamp(-1.0 - self.petiole, -0.95);
        let distance = u.hypot(v - along) * self.half_length / pixel;
        (1.1 - distance).clamp(0.0, 1.0)
    }

    /// The blade's colour at a point: texture, curvature shading, midrib and side veins.
    fn colour_at(&self, p: LeafPoint, pixel: f32) -> Rgb {
        let grain = self.texture.at((p.u + 1.0) / 2.0, (p.v + 1.0) / 2.0);
        let shade = 1.0 + 0.15 * (grain - 0.5) - 0.12 * p.u.signum() * p.across;
        let colour = scale(self.colour, shade);
        let to_pixels = self.half_length / pixel;
        let midrib = p.u.abs() * to_pixels;
        let side = self
            .veins
            .iter()
            .map(|start| {
                (p.v - start - self.vein_slope * p.u.abs()).abs() / self.vein_slope.hypot(1.0)
            })
            .fold(f32::INFINITY, f32::min)
            * to_pixels;
        let vein = (1.0 - midrib).max(0.7 - side).clamp(0.0, 1.0) * (1.0 - p.across).min(1.0);
        mix(colour, self.vein_colour, vein)
    }
}

/// A class's marks on the blade, in the leaf's frame so they move with it.
enum Pattern {
    Healthy,
    /// Spots `(u, v, radius)` of a necrotic colour inside a halo.
    Spots {
        spots: Vec<[f32; 3]>,
        core: Rgb,
        halo: Rgb,
        halo_width: f32,
    },
    /// Patches where a noise field passes a threshold, towards a colour.
    Patches {
        noise: ValueNoise,
        threshold: f32,
        colour: Rgb,
        strength: f32,
    },
    /// Two-tone mottling between a light and a dark green.
    Mottle {
        noise: ValueNoise,
        light: Rgb,
        dark: Rgb,
    },
    /// Dead tissue from the margin inwards, `depth` deep around `centre` (in `v`) over `spread`.
    Margin {
        depth: f32,
        centre: f32,
        spread: f32,
        side: f32,
        wobble: ValueNoise,
        colour: Rgb,
    },
}

impl Pattern {
    fn random(rng: &mut Rng, disease: Disease, leaf: &Leaf) -> Self {
        match disease {
            Disease::Healthy => Pattern::Healthy,
            Disease::LeafSpot => {
                let count = 3 + rng.below(5);
                let spots = spots_on(rng, leaf, count, 0.07, 0.15);
                let core = [rng.range(0.3, 0.42), rng.range(0.18, 0.26), rng.range(0.06, 0.12)];
                Pattern::Spots {
                    spots,
                    core,
                    halo: [0.78, 0.72, 0.18],
                    halo_width: rng.range(1.4, 1.9),
                }
            }
            Disease::Rust => {
                let count = 2 + rng.below(4);
                let clusters = spots_on(rng, leaf, count, 0.0, 0.0);
                let mut pustules = Vec::new();
                for [u, v, _] in clusters {
                    for _ in 0..6 + rng.below(12) {
                        let (du, dv) = (rng.range(-0.18, 0.18), rng.range(-0.18, 0.18));
                        pustules.push([u + du, v + dv, rng.range(0.035, 0.065)]);
                    }
                }
                let core = [rng.range(0.8, 0.92), rng.range(0.4, 0.52), rng.range(0.05, 0.12)];
                Pattern::Spots { spots: pustules, core, halo: [0.75, 0.68, 0.2], halo_width: 1.5 }
            }
            Disease::PowderyMildew => Pattern::Patches {
                noise: ValueNoise::new(rng, 5),
                threshold: rng.range(0.45, 0.6),
                colour: [0.9, 0.9, 0.86],
                strength: rng.range(0.6, 0.85),
            },
            Disease::Blight => Pattern::Margin {
                depth: rng.range(0.6, 1.1),
                centre: rng.range(-0.6, 0.8),
                spread: rng.range(0.35, 0.7),
                side: if rng.chance(0.5) { 1.0 } else { -1.0 },
                wobble: ValueNoise::new(rng, 6),
                colour: [rng.range(0.16, 0.24), rng.range(0.1, 0.15), rng.range(0.05, 0.08)],
            },
            Disease::Mosaic => Pattern::Mottle {
                noise: ValueNoise::new(rng, 6),
                light: [rng.range(0.55, 0.68), rng.range(0.72, 0.82), rng.range(0.25, 0.35)],
                dark: [0.1, rng.range(0.3, 0.38), 0.08],
            },
            Disease::Scorch => Pattern::Margin {
                depth: rng.range(0.22, 0.35),
                centre: 0.0,
                spread: f32::INFINITY,
                side: 0.0,
                wobble: ValueNoise::new(rng, 10),
                colour: [rng.range(0.5, 0.6), rng.range(0.32, 0.4), rng.range(0.12, 0.18)],
            },
        }
    }

    /// `colour` of the healthy blade at `p`, marked by this pattern.
    fn mark(&self, p: LeafPoint, colour: Rgb) -> Rgb {
        match self {
            Pattern::Healthy => colour,
            Pattern::Spots { spots, core, halo, halo_width } => {
                spots.iter().fold(colour, |colour, &[u, v, r]| {
                    let d = (p.u - u).hypot(p.v - v) / r;
                    let colour = mix(
                        colour,
                        *halo,
                        0.8 * (1.0 - smoothstep((d - 1.0) / (halo_width - 1.0))),
                    );
                    // A darker rim, then the core.
                    let core = scale(*core, 0.8 + 0.2 * smoothstep(1.0 - d));
                    mix(colour, core, 1.0 - smoothstep((d - 0.85) / 0.3))
                })
            }
            Pattern::Patches { noise, threshold, colour: patch, strength } => {
                let dust =
                    smoothstep((noise.at((p.u + 1.0) / 2.0, (p.v + 1.0) / 2.0) - threshold) * 8.0);
                mix(colour, *patch, dust * strength)
            }
            Pattern::Mottle { noise, light, dark } => {
                let n = smoothstep((noise.at((p.u + 1.0) / 2.0, (p.v + 1.0) / 2.0) - 0.3) * 2.5);
                mix(colour, mix(*dark, *light, n), 0.75)
            }
            Pattern::Margin { depth, centre, spread, side, wobble, colour: dead } => {
                if p.u * side < 0.0 {
                    return colour;
                }
                let reach = depth
                    * (-((p.v - centre) / spread).powi(2)).exp()
                    * (0.75 + 0.5 * wobble.at((p.v + 1.0) / 2.0, 0.5 + 0.1 * p.across));
                let inside = p.across - (1.0 - reach);
                let colour =
                    mix(colour, [0.7, 0.62, 0.2], 0.7 * (1.0 - smoothstep(-inside / 0.12)));
                mix(colour, *dead, smoothstep(inside / 0.06))
            }
        }
    }
}

/// `count` random points `(u, v, radius)` well inside the blade, radii in `[lo, hi)`.
fn spots_on(rng: &mut Rng, leaf: &Leaf, count: usize, lo: f32, hi: f32) -> Vec<[f32; 3]> {
    (0..count)
        .map(|_| {
            let v = rng.range(-0.75, 0.75);
            let u = leaf.half_width(v) * rng.range(-0.75, 0.75);
            [u, v, rng.range(lo, hi)]
        })
        .collect()
}

/// The ground under the leaf: a colour with a gradient and two scales of noise.
struct Background {
    colour: Rgb,
    gradient: [f32; 2],
    coarse: ValueNoise,
    fine: ValueNoise,
}

impl Background {
    fn random(rng: &mut Rng, domain: Domain) -> Self {
        // The field: grass, grey concrete, a grey-green bench.
        const FIELD: [Rgb; 3] = [[0.33, 0.46, 0.24], [0.52, 0.52, 0.5], [0.38, 0.44, 0.4]];
        // Soil, dark soil, a wooden bench.
        const SOIL: [Rgb; 3] = [[0.4, 0.28, 0.17], [0.3, 0.21, 0.14], [0.52, 0.4, 0.27]];
        let palette: &[Rgb] = match domain {
            // The soil's backgrounds and the field's too.
            Domain::Source => &[SOIL[0], SOIL[1], SOIL[2], FIELD[0], FIELD[1], FIELD[2]],
            Domain::Soil => &SOIL,
            Domain::Target => &FIELD,
        };
        let base = palette[rng.below(palette.len())];
        Self {
            colour: base.map(|c| c * rng.range(0.85, 1.15)),
            gradient: [rng.range(-0.25, 0.25), rng.range(-0.25, 0.25)],
            coarse: ValueNoise::new(rng, 4),
            fine: ValueNoise::new(rng, 24),
        }
    }

    fn colour_at(&self, x: f32, y: f32) -> Rgb {
        let light = 1.0 + self.gradient[0] * (x - 0.5) + self.gradient[1] * (y - 0.5);
        let noise = 0.25 * (self.coarse.at(x, y) - 0.5) + 0.3 * (self.fine.at(x, y) - 0.5);
        scale(self.colour, light + noise)
    }
}

/// The camera and light: brightness, contrast, a colour cast, a light gradient, a cast shadow.
struct Light {
    brightness: f32,
    contrast: f32,
    cast: Rgb,
    gradient: [f32; 2],
    shadow: [f32; 2],
    shadow_strength: f32,
    grain: u64,
}

impl Light {
    fn random(rng: &mut Rng) -> Self {
        let cast = [rng.range(0.9, 1.1), rng.range(0.92, 1.08), rng.range(0.88, 1.12)];
        Self {
            brightness: rng.range(0.75, 1.2),
            contrast: rng.range(0.8, 1.2),
            cast,
            gradient: [rng.range(-0.3, 0.3), rng.range(-0.3, 0.3)],
            shadow: [rng.range(-0.06, 0.06), rng.range(0.02, 0.07)],
            shadow_strength: rng.range(0.25, 0.5),
            grain: rng.next_u64(),
        }
    }

    fn apply(&self, colour: Rgb, x: f32, y: f32, grain: &mut Rng) -> Rgb {
        let light =
            self.brightness * (1.0 + self.gradient[0] * (x - 0.5) + self.gradient[1] * (y - 0.5));
        [0, 1, 2].map(|i| {
            let c = ((colour[i] - 0.5) * self.contrast + 0.5) * light * self.cast[i];
            (c + grain.range(-0.02, 0.02)).clamp(0.0, 1.0)
        })
    }
}

/// One image's worth of random choices.
struct Scene {
    background: Background,
    leaf: Leaf,
    pattern: Pattern,
    light: Light,
}

impl Scene {
    fn random(rng: &mut Rng, domain: Domain, disease: Disease) -> Self {
        let background = Background::random(rng, domain);
        let leaf = Leaf::random(rng, domain);
        let pattern = Pattern::random(rng, disease, &leaf);
        Self { background, leaf, pattern, light: Light::random(rng) }
    }

    fn render(&self, size: u32) -> Image {
        let pixel = 1.0 / size as f32;
        let leaf = &self.leaf;
        let mut grain = Rng::new(self.light.grain);
        let mut image = Image::filled(size, size, [0.0; 3]);
        for (i, out) in image.pixels.iter_mut().enumerate() {
            let x = ((i as u32 % size) as f32 + 0.5) * pixel;
            let y = ((i as u32 / size) as f32 + 0.5) * pixel;
            let (su, sv) = leaf.local(x - self.light.shadow[0], y - self.light.shadow[1]);
            let shadow =
                leaf.coverage(su, sv, pixel, 3.0).max(leaf.petiole_coverage(su, sv, pixel));
            let mut colour =
                scale(self.background.colour_at(x, y), 1.0 - self.light.shadow_strength * shadow);
            let (u, v) = leaf.local(x, y);
            let petiole = leaf.petiole_coverage(u, v, pixel);
            colour = mix(colour, leaf.vein_colour, petiole);
            let blade = leaf.coverage(u, v, pixel, 1.0);
            if blade > 0.0 {
                let across = (u.abs() / leaf.half_width(v).max(1e-6)).min(1.0);
                let point = LeafPoint { u, v, across };
                let healthy = leaf.colour_at(point, pixel);
                colour = mix(colour, self.pattern.mark(point, healthy), blade);
            }
            *out = self.light.apply(colour, x, y, &mut grain);
        }
        image
    }
}

#[cfg(test)]
mod tests {
    use super::{Disease, Domain, Scene};
    use crate::rng::Rng;

    /// The mean colour of `count` scenes of `disease`.
    fn mean_colour(domain: Domain, disease: Disease, count: u64) -> [f32; 3] {
        let mut sum = [0.0; 3];
        for i in 0..count {
            let mean = Scene::random(&mut Rng::derive(11, i), domain, disease).render(32).mean();
            (0..3).for_each(|c| sum[c] += mean[c] / count as f32);
        }
        sum
    }

    #[test]
    fn every_source_disease_changes_the_healthy_leaf() {
        let healthy = mean_colour(Domain::Source, Disease::Healthy, 12);
        for &disease in &Domain::Source.diseases()[1..] {
            let diseased = mean_colour(Domain::Source, disease, 12);
            let change: f32 = (0..3).map(|c| (diseased[c] - healthy[c]).abs()).sum();
            assert!(
                change > 0.01,
                "{} looks like healthy: {diseased:?} vs {healthy:?}",
                disease.name()
            );
        }
    }

    #[test]
    fn the_leaf_is_widest_where_asked_and_closed_at_both_ends() {
        let leaf = super::Leaf::random(&mut Rng::new(1), Domain::Source);
        let widest_v = 2.0 * leaf.widest - 1.0;
        assert!((leaf.half_width(widest_v) - leaf.width).abs() < 1e-5);
        assert_eq!(leaf.half_width(-1.0), 0.0);
        assert_eq!(leaf.half_width(1.0), 0.0);
        assert!(leaf.half_width(widest_v + 0.2) < leaf.width);
    }
}

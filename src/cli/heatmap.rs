//! Renders a temperature field as an 8-bit RGB PNG through an inferno-like colour ramp
//! (black, purple, red, orange, pale yellow), so hot and cold read at a glance.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// Control points of the ramp: temperature and the colour at it; colours in between are linear.
const RAMP: [(f32, [u8; 3]); 5] = [
    (0.00, [0, 0, 4]),
    (0.25, [87, 16, 110]),
    (0.50, [188, 55, 84]),
    (0.75, [249, 142, 9]),
    (1.00, [252, 255, 164]),
];

/// The ramp's colour for `value`, clamped to the ramp's 0..=1 range.
pub fn colour(value: f32) -> [u8; 3] {
    // NaN has no place on the ramp; showing it as the coldest colour keeps the image readable.
    let value = if value.is_nan() {
        0.0
    } else {
        value.clamp(0.0, 1.0)
    };
    for pair in RAMP.windows(2) {
        let ((lo, lo_rgb), (hi, hi_rgb)) = (pair[0], pair[1]);
        if value <= hi {
            let t = (value - lo) / (hi - lo);
            return std::array::from_fn(|c| {
                let (a, b) = (f32::from(lo_rgb[c]), f32::from(hi_rgb[c]));
                (a + (b - a) * t).round() as u8
            });
        }
    }
    RAMP[RAMP.len() - 1].1
}

/// Writes the `side x side` row-major `field` to `path` as a PNG, row 0 at the top.
pub fn write_png(path: &Path, field: &[f32], side: u32) -> Result<(), png::EncodingError> {
    // A fixed 0..=1 scale, rather than the field's own range, keeps images of different runs
    // comparable: the borders and discs start at exactly 1.
    let pixels: Vec<u8> = field.iter().flat_map(|&v| colour(v)).collect();
    let file = BufWriter::new(File::create(path)?);
    let mut encoder = png::Encoder::new(file, side, side);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    // `finish` flushes the buffered file, so a full disk is reported here rather than lost.
    writer.finish()
}

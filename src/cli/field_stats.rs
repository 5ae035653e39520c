//! Minimum, maximum and mean of a scalar field: the one-line health check of a simulation result
//! (diffusion with fixed borders must stay within the initial range).

/// Minimum, maximum and mean of a field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldStats {
    /// Smallest value.
    pub min: f32,
    /// Largest value.
    pub max: f32,
    /// Average value.
    pub mean: f64,
}

impl FieldStats {
    /// The statistics of `values`; all zero when empty.
    pub fn of(values: &[f32]) -> FieldStats {
        if values.is_empty() {
            return FieldStats {
                min: 0.0,
                max: 0.0,
                mean: 0.0,
            };
        }
        let (min, max, sum) = values.iter().fold(
            (f32::INFINITY, f32::NEG_INFINITY, 0.0f64),
            |(min, max, sum), &v| (min.min(v), max.max(v), sum + f64::from(v)),
        );
        // Summing in f64 keeps a 16384^2 grid's mean accurate to the printed digits.
        FieldStats {
            min,
            max,
            mean: sum / values.len() as f64,
        }
    }
}

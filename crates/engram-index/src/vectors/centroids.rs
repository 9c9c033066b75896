//! Each sitting's mean vector (`rank/sittings.rs`): built once per split
//! and per change of the vectors, then one product per sitting a query.

use std::sync::{Arc, PoisonError};

use super::{Vectors, dot, quantize, quantize_i16};
use crate::Kind;
use crate::rank::Sittings;

/// The mean vectors of one split into sittings, unit length, quantized as
/// the items' are (a scale of 0: no trace of the sitting has a vector).
#[derive(Debug)]
pub(super) struct Centroids {
    fingerprint: u64,
    scales: Vec<f32>,
    values: Vec<i8>,
}

impl Centroids {
    pub(super) fn bytes(&self) -> usize {
        self.values.capacity() + self.scales.capacity() * 4
    }
}

impl Vectors {
    /// The cosine of `query` (unit length) with each sitting's mean
    /// vector: `None` for a sitting none of whose traces has a vector.
    pub fn sitting_cosines(&self, query: &[f32], sittings: &Sittings) -> Vec<Option<f32>> {
        if query.len() != self.dim || self.dim == 0 {
            return vec![None; sittings.len()];
        }
        let centroids = self.centroids(sittings);
        let (query_scale, query) = quantize_i16(query);
        centroids
            .scales
            .iter()
            .zip(centroids.values.chunks_exact(self.dim))
            .map(|(scale, values)| {
                (*scale > 0.0).then(|| dot(values, &query) as f32 * scale * query_scale)
            })
            .collect()
    }

    fn centroids(&self, sittings: &Sittings) -> Arc<Centroids> {
        let mut held = self
            .centroids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = held.as_ref()
            && c.fingerprint == sittings.fingerprint()
            && c.scales.len() == sittings.len()
        {
            return Arc::clone(c);
        }
        let dim = self.dim;
        let mut sums = vec![0.0_f32; sittings.len() * dim];
        for (i, e) in self.entries.iter().enumerate() {
            if !e.live || e.kind != Kind::Trace {
                continue;
            }
            let Some(s) = sittings.of(e.order) else {
                continue;
            };
            let values = &self.values[i * dim..(i + 1) * dim];
            for (sum, v) in sums[s * dim..(s + 1) * dim].iter_mut().zip(values) {
                *sum += e.scale * f32::from(*v);
            }
        }
        let mut scales = Vec::with_capacity(sittings.len());
        let mut values = Vec::with_capacity(sums.len());
        for sum in sums.chunks_exact_mut(dim.max(1)) {
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                sum.iter_mut().for_each(|x| *x /= norm);
            }
            let (scale, q) = quantize(sum);
            scales.push(scale);
            values.extend(q);
        }
        let built = Arc::new(Centroids {
            fingerprint: sittings.fingerprint(),
            scales,
            values,
        });
        *held = Some(Arc::clone(&built));
        built
    }

    /// Forgets the mean vectors: the vectors changed.
    pub(super) fn vectors_changed(&mut self) {
        *self
            .centroids
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    pub(super) fn centroid_bytes(&self) -> usize {
        self.centroids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |c| c.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Embedded;

    fn trace(order: u64, vector: Vec<f32>) -> Embedded {
        Embedded {
            key: format!("t{order}"),
            kind: Kind::Trace,
            trace_type: 0,
            order,
            ts: order as f64,
            vector,
        }
    }

    #[test]
    fn a_sittings_mean_vector_is_compared_and_rebuilt_when_vectors_change() {
        let mut v = Vectors::in_memory("m", 2);
        v.write(&[trace(1, vec![1.0, 0.0]), trace(2, vec![0.0, 1.0])], &[])
            .unwrap();
        let sittings = Sittings::split([(1, 0.0), (2, 1.0), (3, 10_000.0)], 60.0, None);
        let cos = v.sitting_cosines(&[1.0, 0.0], &sittings);
        assert_eq!(cos.len(), 2);
        let mean = cos[0].unwrap();
        assert!(
            (mean - std::f32::consts::FRAC_1_SQRT_2).abs() < 0.02,
            "{mean}"
        );
        assert_eq!(cos[1], None, "no trace of the second sitting has a vector");
        assert!(v.centroid_bytes() > 0);

        v.write(&[trace(3, vec![1.0, 0.0])], &["t2"]).unwrap();
        let cos = v.sitting_cosines(&[1.0, 0.0], &sittings);
        assert!(cos[0].unwrap() > 0.98, "{cos:?}");
        assert!(cos[1].unwrap() > 0.98, "{cos:?}");
        assert!(
            v.sitting_cosines(&[1.0], &sittings)
                .iter()
                .all(Option::is_none)
        );
    }
}

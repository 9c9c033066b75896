//! Dense layers in int8: the weights quantized once at load (a scale per
//! output column), each input row quantized as it comes (over its range),
//! the products summed in exact 32-bit integers.
//!
//! Why: the encoder's matrix products ran at ~140 GFLOP/s of the two cores'
//! ~157 in f32, so indexing and a query's embedding could only get faster
//! with narrower numbers. AVX-512 VNNI (`vpdpbusd`) multiplies 64 pairs of
//! bytes and adds them into 16 integers per instruction, four times the f32
//! lanes. The integer sums are exact, so every kernel (the VNNI one, and the
//! portable one on CPUs without it) gives bit-identical results: a model's
//! vectors do not depend on which machine computed them.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes. Weights are symmetric
//! (`w ≈ scale × q`, q in [-127, 127]); an input row is mapped onto its own
//! range (`x ≈ min + step × u`, u in [0, 255]), which keeps a bit more of the
//! small values than a symmetric scale when a few channels stand out (as in
//! BERT's hidden states): `x · w ≈ scale × (step × Σ u q + min × Σ q)`, with
//! each column's `Σ q` known at load.

use rayon::prelude::*;

/// Columns a kernel call computes: four blocks of 16 (one 512-bit register
/// of 32-bit sums each).
const PANEL: usize = 64;
/// Input rows a VNNI kernel call computes: 6 × 4 accumulators, 4 weight
/// registers and a broadcast fit the 32 vector registers.
const ROWS: usize = 6;
/// Rows per parallel task: enough work to be worth a thread, few enough
/// that a batch spreads over both cores.
const ROWS_PER_TASK: usize = 48;

/// A dense layer's weight, quantized and packed for the kernels: panel by
/// panel, then input by groups of four, then the panel's 64 columns with
/// their four inputs side by side (`vpdpbusd`'s operand layout).
#[derive(Debug)]
pub(crate) struct Int8Weight {
    inputs: usize,
    /// `inputs` rounded up to a multiple of 4 (padding weights are zero).
    depth: usize,
    outputs: usize,
    /// `outputs` rounded up to a multiple of [`PANEL`].
    width: usize,
    packed: Vec<i8>,
    scale: Vec<f32>,
    /// `Σ q` of each column's quantized weights.
    column_sum: Vec<f32>,
}

impl Int8Weight {
    /// Quantizes `weight`, stored `[inputs, outputs]` row-major.
    pub(crate) fn new(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(weight.len(), inputs * outputs, "weight shape");
        let depth = inputs.div_ceil(4) * 4;
        let width = outputs.div_ceil(PANEL) * PANEL;
        let column = |j: usize| (0..inputs).map(move |i| weight[i * outputs + j]);
        let scale: Vec<f32> = (0..outputs)
            .map(|j| {
                let max = column(j).fold(0f32, |m, w| m.max(w.abs()));
                if max > 0.0 { max / 127.0 } else { 1.0 }
            })
            .collect();
        let quantized = |i: usize, j: usize| -> i8 {
            if i >= inputs || j >= outputs {
                return 0;
            }
            (weight[i * outputs + j] / scale[j])
                .round()
                .clamp(-127.0, 127.0) as i8
        };
        let mut packed = Vec::with_capacity(depth * width);
        for panel in (0..width).step_by(PANEL) {
            for group in (0..depth).step_by(4) {
                for j in panel..panel + PANEL {
                    for i in group..group + 4 {
                        packed.push(quantized(i, j));
                    }
                }
            }
        }
        let column_sum = (0..outputs)
            .map(|j| (0..inputs).map(|i| i32::from(quantized(i, j))).sum::<i32>() as f32)
            .collect();
        Self {
            inputs,
            depth,
            outputs,
            width,
            packed,
            scale,
            column_sum,
        }
    }

    pub(crate) fn outputs(&self) -> usize {
        self.outputs
    }

    /// `x · W` for `x` of `rows × inputs` (row-major), into `rows × outputs`.
    pub(crate) fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs, "input shape");
        let mut out = vec![0f32; rows * self.outputs];
        // (A layer without inputs or outputs, from a malformed checkpoint,
        // must not reach the zero-sized chunks below.)
        if rows == 0 || self.inputs == 0 || self.outputs == 0 {
            return out;
        }
        let vnni = vnni_available();
        out.par_chunks_mut(ROWS_PER_TASK * self.outputs)
            .zip(x.par_chunks(ROWS_PER_TASK * self.inputs))
            .for_each(|(out, x)| {
                let rows = x.len() / self.inputs;
                let (bytes, ranges) = self.quantize_rows(x, rows);
                let mut sums = vec![0i32; rows * self.width];
                if vnni {
                    simd::products(self, &bytes, rows, &mut sums);
                } else {
                    self.products_portable(&bytes, rows, &mut sums);
                }
                for ((out, sums), &(min, step)) in out
                    .chunks_exact_mut(self.outputs)
                    .zip(sums.chunks_exact(self.width))
                    .zip(&ranges)
                {
                    for (((v, &sum), column_sum), scale) in out
                        .iter_mut()
                        .zip(sums)
                        .zip(&self.column_sum)
                        .zip(&self.scale)
                    {
                        *v = scale * (step * sum as f32 + min * column_sum);
                    }
                }
            });
        out
    }

    /// Each row as bytes over its own range, with that range's `(min,
    /// step)`; padded to `depth` (against zero weights).
    fn quantize_rows(&self, x: &[f32], rows: usize) -> (Vec<u8>, Vec<(f32, f32)>) {
        let mut bytes = vec![0u8; rows * self.depth];
        let mut ranges = Vec::with_capacity(rows);
        for (row, out) in x
            .chunks_exact(self.inputs)
            .zip(bytes.chunks_exact_mut(self.depth))
        {
            let (min, max) = row
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
            let step = (max - min) / 255.0;
            // A constant row is its min exactly. NaN and infinities cannot
            // come from finite weights and layer-normed inputs; should they,
            // the row reads as zeros rather than poisoning the batch.
            let (min, step) = match (min.is_finite() && max.is_finite(), step > 0.0) {
                (true, true) => (min, step),
                (true, false) => (min, 1.0),
                (false, _) => (0.0, 1.0),
            };
            let inv = 1.0 / step;
            for (b, v) in out.iter_mut().zip(row) {
                *b = round(((v - min) * inv).clamp(0.0, 255.0)) as u8;
            }
            ranges.push((min, step));
        }
        (bytes, ranges)
    }

    /// The integer sums without SIMD intrinsics (what the compiler makes of
    /// plain loops): on CPUs without VNNI, and the reference in tests.
    fn products_portable(&self, bytes: &[u8], rows: usize, sums: &mut [i32]) {
        let groups = self.depth / 4;
        for (p, panel) in self.packed.chunks_exact(groups * 4 * PANEL).enumerate() {
            for r in 0..rows {
                let row = &bytes[r * self.depth..(r + 1) * self.depth];
                let mut acc = [0i32; PANEL];
                for (g, weights) in panel.chunks_exact(4 * PANEL).enumerate() {
                    let x = &row[g * 4..g * 4 + 4];
                    for (a, w) in acc.iter_mut().zip(weights.chunks_exact(4)) {
                        *a += (0..4)
                            .map(|t| i32::from(x[t]) * i32::from(w[t]))
                            .sum::<i32>();
                    }
                }
                sums[r * self.width + p * PANEL..][..PANEL].copy_from_slice(&acc);
            }
        }
    }
}

/// Rounds to the nearest integer (ties to even) for |x| < 2²²: adding and
/// taking away 1.5 × 2²³ leaves no fraction bits. `f32::round` is a libm
/// call on baseline x86-64 and was 5% of a query's time; this vectorizes.
pub(crate) fn round(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

/// Whether this CPU runs the VNNI kernel.
pub(crate) fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd {
    //! The one place Engram uses `unsafe`: vector loads and stores through
    //! pointers, and calling a function compiled for AVX-512, which is only
    //! done after [`super::vnni_available`] said the CPU has it.

    use std::arch::x86_64::{
        __m512i, _mm512_dpbusd_epi32, _mm512_loadu_si512, _mm512_set1_epi32, _mm512_setzero_si512,
        _mm512_storeu_si512,
    };

    use super::{Int8Weight, PANEL, ROWS};

    /// The integer sums of `rows` quantized rows (`bytes`, `rows × depth`)
    /// against every panel, into `sums` (`rows × width`).
    pub(super) fn products(w: &Int8Weight, bytes: &[u8], rows: usize, sums: &mut [i32]) {
        assert!(super::vnni_available());
        assert!(bytes.len() >= rows * w.depth && sums.len() >= rows * w.width);
        assert_eq!(w.packed.len(), w.depth * w.width);
        // SAFETY: the CPU has AVX-512F and VNNI (asserted above); every
        // pointer the kernel reads or writes stays inside the slices whose
        // lengths were checked above (rows `r..r + n` of `bytes` and
        // `sums`, panel `p` of `packed`, each `depth` or `width` long).
        unsafe { products_vnni(w, bytes, rows, sums) }
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn products_vnni(w: &Int8Weight, bytes: &[u8], rows: usize, sums: &mut [i32]) {
        let panel_len = w.depth * PANEL;
        for p in 0..w.width / PANEL {
            let weights = unsafe { w.packed.as_ptr().add(p * panel_len) };
            let mut r = 0;
            while r < rows {
                let n = (rows - r).min(ROWS);
                let a = unsafe { bytes.as_ptr().add(r * w.depth) };
                let out = unsafe { sums.as_mut_ptr().add(r * w.width + p * PANEL) };
                unsafe {
                    match n {
                        6 => tile::<6>(a, w.depth, weights, out, w.width),
                        5 => tile::<5>(a, w.depth, weights, out, w.width),
                        4 => tile::<4>(a, w.depth, weights, out, w.width),
                        3 => tile::<3>(a, w.depth, weights, out, w.width),
                        2 => tile::<2>(a, w.depth, weights, out, w.width),
                        _ => tile::<1>(a, w.depth, weights, out, w.width),
                    }
                }
                r += n;
            }
        }
    }

    /// `R` rows × one panel: for each group of four inputs, the row's four
    /// bytes broadcast against the panel's four registers of weights.
    #[target_feature(enable = "avx512f,avx512vnni")]
    #[inline]
    unsafe fn tile<const R: usize>(
        a: *const u8,
        depth: usize,
        weights: *const i8,
        out: *mut i32,
        out_stride: usize,
    ) {
        let mut acc: [[__m512i; 4]; R] = [[_mm512_setzero_si512(); 4]; R];
        for g in 0..depth / 4 {
            let wp = unsafe { weights.add(g * 4 * PANEL) };
            // (Written out: a closure would not inherit the target features.)
            let w: [__m512i; 4] = unsafe {
                [
                    _mm512_loadu_si512(wp.cast()),
                    _mm512_loadu_si512(wp.add(64).cast()),
                    _mm512_loadu_si512(wp.add(128).cast()),
                    _mm512_loadu_si512(wp.add(192).cast()),
                ]
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                let four = unsafe { a.add(r * depth + g * 4).cast::<i32>().read_unaligned() };
                let x = _mm512_set1_epi32(four);
                for (acc, w) in acc.iter_mut().zip(&w) {
                    *acc = _mm512_dpbusd_epi32(*acc, x, *w);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (b, acc) in acc.iter().enumerate() {
                unsafe { _mm512_storeu_si512(out.add(r * out_stride + b * 16).cast(), *acc) };
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) fn products(_: &super::Int8Weight, _: &[u8], _: usize, _: &mut [i32]) {
        unreachable!("VNNI is only detected on x86_64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (the tests need no crate for it).
    fn values(seed: u64, n: usize, spread: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * spread
            })
            .collect()
    }

    #[test]
    fn the_kernels_agree_exactly_and_approximate_f32() {
        // Shapes off every block size: inputs not a multiple of 4, outputs
        // not of 16 or 64, rows not of 6 or 48.
        for (case, &(rows, inputs, outputs)) in [
            (1, 384, 1152),
            (7, 30, 70),
            (13, 5, 3),
            (50, 64, 65),
            (97, 384, 384),
        ]
        .iter()
        .enumerate()
        {
            let weight = values(case as u64, inputs * outputs, 0.2);
            let x = values(100 + case as u64, rows * inputs, 3.0);
            let w = Int8Weight::new(&weight, inputs, outputs);
            let (bytes, _) = w.quantize_rows(&x, rows);
            let mut portable = vec![0; rows * w.width];
            w.products_portable(&bytes, rows, &mut portable);
            if vnni_available() {
                let mut fast = vec![0; rows * w.width];
                simd::products(&w, &bytes, rows, &mut fast);
                assert_eq!(fast, portable, "case {case}: the VNNI sums differ");
            }
            let got = w.forward(&x, rows);
            for r in 0..rows {
                for j in 0..outputs {
                    let exact: f32 = (0..inputs)
                        .map(|i| x[r * inputs + i] * weight[i * outputs + j])
                        .sum();
                    // Two roundings of at most half a step each, over
                    // `inputs` products: well inside 2% of the row's scale.
                    let bound = 0.02 * 3.0 * 0.2 * (inputs as f32).sqrt() + 1e-3;
                    let v = got[r * outputs + j];
                    assert!(
                        (v - exact).abs() <= bound,
                        "case {case} ({r}, {j}): {v} against {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_rows_and_zero_weights_stay_zero() {
        let w = Int8Weight::new(&[0.0; 12], 4, 3);
        assert_eq!(w.forward(&[1.0, -2.0, 3.0, 4.0], 1), vec![0.0; 3]);
        let w = Int8Weight::new(&values(1, 12, 1.0), 4, 3);
        assert_eq!(w.forward(&[0.0; 8], 2), vec![0.0; 6]);
        assert!(w.forward(&[], 0).is_empty());
        assert_eq!(Int8Weight::new(&[], 0, 3).forward(&[], 2), vec![0.0; 6]);
        assert!(Int8Weight::new(&[], 3, 0).forward(&[1.0; 3], 1).is_empty());
    }
}

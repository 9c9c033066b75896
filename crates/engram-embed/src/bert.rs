//! A BERT encoder over packed sequences.
//!
//! A batch is the concatenation of its texts' tokens — no padding — so every
//! dense layer is one large matrix product over all tokens of the batch, and
//! attention runs per text over that text's tokens only. candle's own BERT
//! pads to the longest text and multiplies per text; on two cores this is
//! several times faster for short, uneven messages.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::int8::Int8Weight;

type Result<T> = candle_core::Result<T>;

/// The fields of a Hugging Face `config.json` this encoder reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_owned()
}

/// How the dense layers multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// The checkpoint's own numbers.
    F32,
    /// Weights and inputs quantized to bytes (`int8.rs`).
    Int8,
}

impl Precision {
    /// Int8 where the CPU multiplies bytes natively (AVX-512 VNNI), else
    /// f32: without VNNI the int8 products are slower than f32's.
    pub fn fastest() -> Self {
        if crate::int8::vnni_available() {
            Self::Int8
        } else {
            Self::F32
        }
    }
}

/// A dense layer with its weight stored `[in, out]`, ready to multiply.
#[derive(Debug)]
struct Dense {
    weight: Weight,
    bias: Vec<f32>,
}

#[derive(Debug)]
enum Weight {
    F32(Tensor),
    Int8(Int8Weight),
}

impl Dense {
    /// `weight` is `[in, out]`.
    fn new(weight: Tensor, bias: Vec<f32>, precision: Precision) -> Result<Self> {
        let weight = match precision {
            Precision::F32 => Weight::F32(weight),
            Precision::Int8 => {
                let (inputs, outputs) = weight.dims2()?;
                let values = weight.flatten_all()?.to_vec1::<f32>()?;
                Weight::Int8(Int8Weight::new(&values, inputs, outputs))
            }
        };
        Ok(Self { weight, bias })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_then(x, |_| ())
    }

    /// `x · W + b`, then `then` on every output row. The bias is added here
    /// rather than with candle's `broadcast_add`, whose strided path took
    /// an eighth of the encoder's time.
    fn forward_then(&self, x: &Tensor, then: impl Fn(&mut [f32])) -> Result<Tensor> {
        let (shape, mut values) = match &self.weight {
            Weight::Int8(int8) => {
                let rows = x.dims()[0];
                let input = x.flatten_all()?.to_vec1::<f32>()?;
                let shape = candle_core::Shape::from((rows, int8.outputs()));
                (shape, int8.forward(&input, rows))
            }
            Weight::F32(weight) => {
                let product = x.matmul(weight)?;
                (
                    product.shape().clone(),
                    product.flatten_all()?.to_vec1::<f32>()?,
                )
            }
        };
        for row in values.chunks_exact_mut(self.bias.len()) {
            row.iter_mut().zip(&self.bias).for_each(|(v, b)| *v += b);
            then(row);
        }
        Tensor::from_vec(values, shape, &Device::Cpu)
    }
}

#[derive(Debug)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Norm {
    /// Layer normalization of each row. Written here because candle's CPU
    /// kernel sums one float at a time (a tenth of a short query's time);
    /// eight running sums let the compiler use vector registers.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let shape = x.shape().clone();
        let mut values = x.flatten_all()?.to_vec1::<f32>()?;
        let n = self.weight.len();
        for row in values.chunks_exact_mut(n) {
            let mean = lanes_sum(row, |v| v) / n as f32;
            let var = lanes_sum(row, |v| (v - mean) * (v - mean)) / n as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = (*v - mean) * inv * w + b;
            }
        }
        Tensor::from_vec(values, shape, &Device::Cpu)
    }
}

/// `Σ f(v)` over `values` in eight interleaved sums.
fn lanes_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(chunk) {
            *l += f(*v);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    lanes.iter().sum::<f32>() + tail
}

#[derive(Debug)]
struct Layer {
    /// Query, key and value in one product: `[hidden, 3 × hidden]`.
    qkv: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
}

#[derive(Debug)]
pub struct Bert {
    words: Tensor,
    positions: Tensor,
    token_type: Tensor,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    hidden: usize,
}

struct Weights {
    tensors: HashMap<String, Tensor>,
    /// `bert.` in checkpoints saved from a `BertFor…` model.
    prefix: &'static str,
    precision: Precision,
}

impl Weights {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let key = format!("{}{name}", self.prefix);
        let tensor = self
            .tensors
            .remove(&key)
            .ok_or_else(|| candle_core::Error::Msg(format!("weight {key} missing")))?;
        if tensor.dims() != shape {
            return Err(candle_core::Error::Msg(format!(
                "weight {key} has shape {:?}, expected {shape:?}",
                tensor.dims()
            )));
        }
        tensor.to_dtype(DType::F32)
    }

    /// A PyTorch `Linear` (`[out, in]`): its weight as `[in, out]`, and
    /// its bias.
    fn linear(&mut self, name: &str, inputs: usize, outputs: usize) -> Result<(Tensor, Vec<f32>)> {
        let weight = self.take(&format!("{name}.weight"), &[outputs, inputs])?;
        Ok((
            weight.t()?.contiguous()?,
            self.take(&format!("{name}.bias"), &[outputs])?.to_vec1()?,
        ))
    }

    fn dense(&mut self, name: &str, inputs: usize, outputs: usize) -> Result<Dense> {
        let (weight, bias) = self.linear(name, inputs, outputs)?;
        Dense::new(weight, bias, self.precision)
    }

    fn norm(&mut self, name: &str, hidden: usize, eps: f64) -> Result<Norm> {
        Ok(Norm {
            weight: self.take(&format!("{name}.weight"), &[hidden])?.to_vec1()?,
            bias: self.take(&format!("{name}.bias"), &[hidden])?.to_vec1()?,
            eps: eps as f32,
        })
    }
}

impl Bert {
    /// The encoder from a safetensors checkpoint's bytes.
    pub fn load(safetensors: &[u8], config: &Config, precision: Precision) -> Result<Self> {
        let bad = |what: String| candle_core::Error::Msg(what);
        if config.hidden_act != "gelu" {
            return Err(bad(format!(
                "hidden_act {:?} is not supported (gelu only)",
                config.hidden_act
            )));
        }
        let hidden = config.hidden_size;
        let heads = config.num_attention_heads;
        if heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(bad(format!(
                "{hidden} hidden units do not split into {heads} heads"
            )));
        }
        let tensors = candle_core::safetensors::load_buffer(safetensors, &Device::Cpu)?;
        let prefix = if tensors.contains_key("bert.embeddings.word_embeddings.weight") {
            "bert."
        } else {
            ""
        };
        // The vocabulary's size is whatever the checkpoint has.
        let vocab = tensors
            .get(&format!("{prefix}embeddings.word_embeddings.weight"))
            .and_then(|t| t.dims().first().copied())
            .unwrap_or(0);
        let mut w = Weights {
            tensors,
            prefix,
            precision,
        };
        let eps = config.layer_norm_eps;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let at = |part: &str| format!("encoder.layer.{i}.{part}");
            let q = w.linear(&at("attention.self.query"), hidden, hidden)?;
            let k = w.linear(&at("attention.self.key"), hidden, hidden)?;
            let v = w.linear(&at("attention.self.value"), hidden, hidden)?;
            let qkv = Dense::new(
                Tensor::cat(&[&q.0, &k.0, &v.0], 1)?,
                [q.1, k.1, v.1].concat(),
                precision,
            )?;
            layers.push(Layer {
                qkv,
                attention_out: w.dense(&at("attention.output.dense"), hidden, hidden)?,
                attention_norm: w.norm(&at("attention.output.LayerNorm"), hidden, eps)?,
                intermediate: w.dense(
                    &at("intermediate.dense"),
                    hidden,
                    config.intermediate_size,
                )?,
                output: w.dense(&at("output.dense"), config.intermediate_size, hidden)?,
                output_norm: w.norm(&at("output.LayerNorm"), hidden, eps)?,
            });
        }
        Ok(Self {
            words: w.take("embeddings.word_embeddings.weight", &[vocab, hidden])?,
            positions: w.take(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, hidden],
            )?,
            token_type: w
                .take("embeddings.token_type_embeddings.weight", &[2, hidden])?
                .narrow(0, 0, 1)?,
            embeddings_norm: w.norm("embeddings.LayerNorm", hidden, eps)?,
            layers,
            heads,
            head_dim: hidden / heads,
            hidden,
        })
    }

    pub fn vocab(&self) -> usize {
        self.words.dims()[0]
    }

    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Each sequence's vector: the mean of its last layer's tokens from
    /// token `skips[i]` on (the tokens before are read, as context, but
    /// not averaged in; none skipped where `skips` is shorter), calling
    /// `between` before each of a layer's four matrix products (where
    /// background work can make way for requests: a product of a
    /// 256-token text is ~2 ms on one core). Every id must be below
    /// [`Self::vocab`] and no sequence longer than the checkpoint's
    /// `max_position_embeddings` (the caller's tokenizer truncates).
    pub fn pooled_from(
        &self,
        sequences: &[Vec<u32>],
        skips: &[usize],
        mut between: impl FnMut(),
    ) -> Result<Vec<Vec<f32>>> {
        let lengths: Vec<usize> = sequences.iter().map(Vec::len).collect();
        let ids: Vec<u32> = sequences.iter().flatten().copied().collect();
        if ids.is_empty() {
            return Ok(vec![vec![0.0; self.hidden]; sequences.len()]);
        }
        let positions: Vec<u32> = lengths.iter().flat_map(|&n| 0..n as u32).collect();
        let total = ids.len();
        let ids = Tensor::from_vec(ids, total, &Device::Cpu)?;
        let positions = Tensor::from_vec(positions, total, &Device::Cpu)?;
        let x = self
            .words
            .index_select(&ids, 0)?
            .add(&self.positions.index_select(&positions, 0)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.embeddings_norm.forward(&x)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &lengths, &mut between)?;
        }
        let mut out = Vec::with_capacity(sequences.len());
        let mut start = 0;
        for (i, &n) in lengths.iter().enumerate() {
            if n == 0 {
                out.push(vec![0.0; self.hidden]);
                continue;
            }
            let skip = skips.get(i).copied().unwrap_or(0).min(n - 1);
            out.push(
                x.narrow(0, start + skip, n - skip)?
                    .mean(0)?
                    .to_vec1::<f32>()?,
            );
            start += n;
        }
        Ok(out)
    }

    fn layer(
        &self,
        layer: &Layer,
        x: &Tensor,
        lengths: &[usize],
        between: &mut impl FnMut(),
    ) -> Result<Tensor> {
        between();
        let qkv = layer.qkv.forward(x)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut contexts = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &n in lengths.iter().filter(|&&n| n > 0) {
            let rows = qkv.narrow(0, start, n)?;
            // [n, hidden] → [heads, n, head_dim]
            let split = |part: usize| -> Result<Tensor> {
                rows.narrow(1, part * self.hidden, self.hidden)?
                    .reshape((n, self.heads, self.head_dim))?
                    .transpose(0, 1)?
                    .contiguous()
            };
            let (q, k, v) = (split(0)?, split(1)?, split(2)?);
            let weights = softmax_rows(&q.matmul(&k.t()?)?, scale as f32)?;
            let context = weights
                .matmul(&v)?
                .transpose(0, 1)?
                .reshape((n, self.hidden))?;
            contexts.push(context);
            start += n;
        }
        let context = Tensor::cat(&contexts, 0)?;
        between();
        let attended = layer.attention_out.forward(&context)?;
        let x = layer.attention_norm.forward(&attended.add(x)?)?;
        between();
        let h = layer.intermediate.forward_then(&x, gelu)?;
        between();
        layer
            .output_norm
            .forward(&layer.output.forward(&h)?.add(&x)?)
    }
}

/// `softmax(scale × row)` of every row of `scores`. candle's CPU softmax
/// calls libm's scalar `expf` and sums one float at a time (a third of a
/// 256-token text's time); [`exp`] and [`lanes_sum`] vectorize.
fn softmax_rows(scores: &Tensor, scale: f32) -> Result<Tensor> {
    let shape = scores.shape().clone();
    let n = shape.dims().last().copied().unwrap_or(1).max(1);
    let mut values = scores.flatten_all()?.to_vec1::<f32>()?;
    for row in values.chunks_exact_mut(n) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        for v in row.iter_mut() {
            *v = exp((*v - max) * scale);
        }
        let inv = 1.0 / lanes_sum(row, |v| v);
        row.iter_mut().for_each(|v| *v *= inv);
    }
    Tensor::from_vec(values, shape, &Device::Cpu)
}

/// `eˣ` for x ≤ 0 (softmax's arguments after taking the max off), to a
/// relative error of a few 1e-6 (x·log₂e rounded to f32): 2 to the nearest
/// whole number of x·log₂e by the exponent bits, and to the rest by a
/// degree-6 polynomial. Below -87 the answer is 0, as f32's would nearly
/// be.
fn exp(x: f32) -> f32 {
    let t = (x * std::f32::consts::LOG2_E).max(-126.0);
    // The nearest whole number, so f is in [-0.5, 0.5], where the series
    // below is good to f32's precision.
    let whole = crate::int8::round(t);
    let f = t - whole;
    let whole = whole as i32;
    // 2^f: the Taylor terms of e^(f ln 2).
    const C: [f32; 7] = [
        1.0,
        std::f32::consts::LN_2,
        0.240_226_5,
        0.055_504_11,
        0.009_618_129,
        0.001_333_355_8,
        0.000_154_035_3,
    ];
    let p = C[0] + f * (C[1] + f * (C[2] + f * (C[3] + f * (C[4] + f * (C[5] + f * C[6])))));
    f32::from_bits(((whole + 127) as u32) << 23) * p
}

/// The exact (erf) GELU BERT was trained with, through a rational erf that
/// vectorizes: libm's scalar `erff` was a fifth of the encoder's time.
fn gelu(values: &mut [f32]) {
    for v in values {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// erf as a ratio of odd and even polynomials on [-4, 4] (beyond it erf is
/// ±1 in f32); absolute error below 1e-6.
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    for a in [
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.9546e-3,
        -1.609_603_3e-2,
    ] {
        p = p * x2 + a;
    }
    let mut q = -1.456_607_2e-5_f32;
    for b in [-2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_474e-2] {
        q = q * x2 + b;
    }
    x * p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf by its Taylor series in f64, exact enough on [-4, 4] to check
    /// the rational form against.
    fn erf_reference(x: f64) -> f64 {
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn exp_matches_std() {
        for i in 0..=10_000 {
            let x = -90.0 * i as f32 / 10_000.0;
            let (got, want) = (exp(x), x.exp());
            assert!(
                (got - want).abs() <= want * 4e-6 + 1e-37,
                "exp({x}) = {got}, std says {want}"
            );
        }
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn erf_matches_the_series() {
        let mut worst = 0.0_f64;
        for i in -4000..=4000 {
            let x = i as f64 / 1000.0;
            worst = worst.max((erf(x as f32) as f64 - erf_reference(x)).abs());
        }
        assert!(worst < 1e-6, "worst error {worst}");
        assert_eq!(erf(40.0), erf(4.0));
        assert!((erf(4.0) - 1.0).abs() < 1e-6);
    }
}

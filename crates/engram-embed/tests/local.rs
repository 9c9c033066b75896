//! The real all-MiniLM-L6-v2, as `make models` extracts it from PyPI.

use std::path::PathBuf;

use engram_core::embed::Embedder;
use engram_embed::{LocalModel, Precision};

/// `ENGRAM_TEST_MODEL`, else the workspace's `models/all-MiniLM-L6-v2`.
fn model_dir() -> PathBuf {
    std::env::var_os("ENGRAM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        })
}

fn model() -> LocalModel {
    LocalModel::load(&model_dir())
        .unwrap_or_else(|e| panic!("{e}: the local model is missing; `make models` installs it"))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn vectors_match_sentence_transformers() {
    let texts: Vec<String> = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
    ]
    .map(String::from)
    .to_vec();
    // sentence-transformers gives 0.7553 and -0.1050 for these pairs: f32
    // within 0.002 of it, int8 within 0.005.
    for (precision, within) in [(Precision::F32, 2e-3), (Precision::Int8, 5e-3)] {
        let model = LocalModel::load_as(&model_dir(), precision).unwrap();
        assert_eq!(model.dim(), 384);
        assert!(
            model.model().starts_with("all-MiniLM-L6-v2#"),
            "{}",
            model.model()
        );
        let v = model.embed_blocking(&texts).unwrap();
        let (near, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
        assert!((near - 0.7553).abs() < within, "{precision:?}: {near}");
        assert!((far + 0.1050).abs() < within, "{precision:?}: {far}");
        for vector in &v {
            assert!((cosine(vector, vector) - 1.0).abs() < 1e-5);
        }
    }
}

#[test]
fn a_batch_gives_what_each_text_gives_alone() {
    let model = model();
    let long = "words and more words ".repeat(400);
    let texts: Vec<String> = vec![
        "short".into(),
        String::new(),
        long.clone(),
        "a medium sized sentence about gardening in the spring".into(),
        "\u{0}\u{7f}\u{fffd} 🦀 ".into(),
    ];
    let together = model.embed_blocking(&texts).unwrap();
    for (text, vector) in texts.iter().zip(&together) {
        let alone = model.embed_blocking(std::slice::from_ref(text)).unwrap();
        assert_eq!(vector.len(), 384);
        assert!(vector.iter().all(|x| x.is_finite()));
        assert!(cosine(vector, &alone[0]) > 0.9999, "{text:?}");
    }
}

#[test]
fn paraphrases_find_their_sentence() {
    let model = model();
    let memories: Vec<String> = [
        "I adopted a puppy from the shelter last weekend.",
        "My flight to Lisbon got cancelled because of the storm.",
        "We finally repainted the kitchen a pale yellow.",
        "I started taking piano lessons on Tuesday evenings.",
    ]
    .map(String::from)
    .to_vec();
    let questions = [
        (0, "Did they get a new dog?"),
        (1, "What happened with the trip to Portugal?"),
        (2, "Which colour did the cooking room become?"),
        (3, "Is someone learning a musical instrument?"),
    ];
    let stored = model.embed_blocking(&memories).unwrap();
    for (want, question) in questions {
        let q = &model.embed_blocking(&[question.to_owned()]).unwrap()[0];
        let best = (0..stored.len())
            .max_by(|&a, &b| cosine(q, &stored[a]).total_cmp(&cosine(q, &stored[b])))
            .unwrap();
        assert_eq!(best, want, "{question}");
    }
}

#[test]
fn a_broken_model_dir_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let err = LocalModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"hidden_size":384,"intermediate_size":1536,"num_attention_heads":12,"num_hidden_layers":6,"max_position_embeddings":512}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
    let err = LocalModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model in"), "{err}");
}

#[test]
fn int8_vectors_are_near_f32_and_named_apart() {
    let f32 = LocalModel::load_as(&model_dir(), Precision::F32).unwrap();
    let int8 = LocalModel::load_as(&model_dir(), Precision::Int8).unwrap();
    assert!(!f32.model().contains("+int8"), "{}", f32.model());
    assert_eq!(int8.model(), format!("{}+int8", f32.model()));
    let texts: Vec<String> = [
        "A man is eating food.",
        "The weather in Paris was rainy all week, so we stayed in the museums.",
        "fn main() { println!(\"hello\"); }",
        "ok",
        &"a long message about gardening and tomatoes ".repeat(30),
    ]
    .map(String::from)
    .to_vec();
    let a = f32.embed_blocking(&texts).unwrap();
    let b = int8.embed_blocking(&texts).unwrap();
    for ((text, a), b) in texts.iter().zip(&a).zip(&b) {
        let c = cosine(a, b);
        assert!(c > 0.99, "{text:?}: cosine {c}");
        assert!(c < 0.999_999, "{text:?}: int8 gave f32's vector");
    }
}

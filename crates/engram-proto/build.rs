//! Generates the engram.v1 types and service stubs into OUT_DIR, plus the
//! descriptor set that server reflection serves.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let protos = [
        proto_root.join("engram/v1/types.proto"),
        proto_root.join("engram/v1/memory.proto"),
        proto_root.join("engram/v1/facts.proto"),
        proto_root.join("engram/v1/service.proto"),
    ];

    // tonic-prost-build's own rerun hint does not cover the include dir.
    println!("cargo:rerun-if-changed={}", proto_root.display());

    let mut config = tonic_prost_build::Config::new();
    // The vendored protoc: no system protoc needed, no PROTOC env mutation.
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        // Undecodable requests are INVALID_ARGUMENT (see codec.rs).
        .codec_path("crate::codec::EngramCodec")
        .file_descriptor_set_path(out_dir.join("engram_descriptor.bin"))
        .compile_with_config(config, &protos, &[proto_root])?;
    Ok(())
}

//! The gRPC contract of Engram (`proto/engram/v1`), generated at build time.
//!
//! - [`pb`]: messages, enums, `memory_service_client` and `memory_service_server`.
//! - [`codec`]: prost's codec, with undecodable requests INVALID_ARGUMENT.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for server reflection.

pub mod codec;

/// Generated `engram.v1` code.
pub mod pb {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("engram.v1");
}

/// Encoded `FileDescriptorSet` of `engram.v1` (and its imports).
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("engram_descriptor");

//! The gRPC contract of Engram (`proto/engram/v1`), generated at build time.
//!
//! - [`pb`]: messages, enums, `memory_service_client` and `memory_service_server`.
//! - [`codec`]: prost's codec, with undecodable requests INVALID_ARGUMENT.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for server reflection.
//! - [`METHODS`]: the methods of `MemoryService`.

pub mod codec;

/// Generated `engram.v1` code.
pub mod pb {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("engram.v1");
}

/// Encoded `FileDescriptorSet` of `engram.v1` (and its imports).
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("engram_descriptor");

/// The methods of `engram.v1.MemoryService`, in the order of the proto.
pub const METHODS: [&str; 29] = [
    "Ingest",
    "PrepareRequest",
    "Compact",
    "Retrieve",
    "SearchHistory",
    "GetContextStats",
    "ListCompactions",
    "ListAgents",
    "DeleteAgent",
    "ForkAgent",
    "DeleteUser",
    "ListUsers",
    "ConsolidateUser",
    "ListConsolidations",
    "ListMemoryBlocks",
    "GetMemoryBlock",
    "PutMemoryBlock",
    "EditMemoryBlock",
    "DeleteMemoryBlock",
    "AddMemories",
    "ListMemories",
    "GetMemory",
    "GetMemoryHistory",
    "UpdateMemory",
    "DeleteMemory",
    "ForgetTurn",
    "ForgetEvents",
    "ExportMemory",
    "ImportMemory",
];

#[cfg(test)]
mod tests {
    use prost::Message;

    #[test]
    fn methods_are_those_of_the_service() {
        let set = prost_types::FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET).unwrap();
        let service = set
            .file
            .iter()
            .flat_map(|f| &f.service)
            .find(|s| s.name() == "MemoryService")
            .unwrap();
        let names: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
        assert_eq!(names, super::METHODS);
    }
}

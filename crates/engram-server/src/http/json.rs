//! The proto3 JSON mapping of the contract's messages, read from the
//! descriptors the build generates (the same ones server reflection
//! serves, so grpcurl's JSON and ours agree): lowerCamelCase names (the
//! proto's names accepted too), enums by name, 64-bit integers as strings,
//! bytes in base64, default values left out, unknown fields refused.

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use tonic::Status;

/// The service's methods' message descriptors.
#[derive(Debug, Clone)]
pub struct Json {
    pool: DescriptorPool,
}

/// Past this many bytes, reading or writing JSON leaves the async workers.
const INLINE_BYTES: usize = 64 * 1024;

impl Json {
    pub fn new() -> Self {
        let pool = DescriptorPool::decode(engram_proto::FILE_DESCRIPTOR_SET)
            .expect("the build's descriptor set decodes");
        Self { pool }
    }

    /// The request and response messages of `method`, if the service has it.
    pub fn method(&self, method: &str) -> Option<(MessageDescriptor, MessageDescriptor)> {
        let service = self.pool.get_service_by_name(SERVICE)?;
        let found = service.methods().find(|m| m.name() == method)?;
        Some((found.input(), found.output()))
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Reads `body` (empty: every field its default) as `T`, the message
    /// `desc` describes: INVALID_ARGUMENT, saying where, when it is not.
    pub async fn decode<T: prost::Message + Default + Send + 'static>(
        &self,
        desc: MessageDescriptor,
        body: bytes::Bytes,
    ) -> Result<T, Status> {
        if body.len() <= INLINE_BYTES {
            return decode_now(&desc, &body);
        }
        off_workers(move || decode_now(&desc, &body)).await
    }

    /// Writes `message` as JSON.
    pub async fn encode<T: prost::Message + Send + 'static>(
        &self,
        desc: MessageDescriptor,
        message: T,
    ) -> Result<Vec<u8>, Status> {
        let small = message.encoded_len() <= INLINE_BYTES;
        let write = move || encode_now(&desc, &message);
        if small {
            return write();
        }
        off_workers(write).await
    }
}

impl Default for Json {
    fn default() -> Self {
        Self::new()
    }
}

/// The full name of the one service.
pub const SERVICE: &str = "engram.v1.MemoryService";

fn decode_now<T: prost::Message + Default>(
    desc: &MessageDescriptor,
    body: &[u8],
) -> Result<T, Status> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    let mut reader = serde_json::Deserializer::from_slice(body);
    let dynamic = DynamicMessage::deserialize(desc.clone(), &mut reader)
        .and_then(|m| reader.end().map(|()| m))
        .map_err(|e| {
            Status::invalid_argument(format!(
                "the body is not a JSON {} message: {e}",
                desc.name()
            ))
        })?;
    dynamic.transcode_to::<T>().map_err(|e| {
        Status::invalid_argument(format!("the body is not a valid {}: {e}", desc.name()))
    })
}

fn encode_now<T: prost::Message>(desc: &MessageDescriptor, message: &T) -> Result<Vec<u8>, Status> {
    let mut dynamic = DynamicMessage::new(desc.clone());
    dynamic
        .transcode_from(message)
        .map_err(|e| Status::internal(format!("encoding the answer: {e}")))?;
    let mut out = Vec::with_capacity(message.encoded_len() * 2 + 16);
    let mut writer = serde_json::Serializer::new(&mut out);
    dynamic
        .serialize_with_options(&mut writer, &SerializeOptions::new())
        .map_err(|e| Status::internal(format!("encoding the answer: {e}")))?;
    Ok(out)
}

/// Runs CPU work on the blocking pool (a panic there is INTERNAL).
async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Err(crate::status::panicked()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_proto::pb;
    use proptest::prelude::*;

    fn ingest_desc(json: &Json) -> MessageDescriptor {
        json.method("Ingest").unwrap().0
    }

    #[test]
    fn nesting_past_the_limit_is_refused_not_a_crash() {
        let json = Json::new();
        let deep = format!(
            r#"{{"agentId": "a", "events": [{{"traceType": "TRACE_TYPE_TOOL_CALL", "toolArgs": {{"x": {}1{}}}}}]}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let refused = decode_now::<pb::IngestRequest>(&ingest_desc(&json), deep.as_bytes());
        assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn a_message_goes_out_and_back_unchanged() {
        let json = Json::new();
        let (input, _) = json.method("Ingest").unwrap();
        let request = pb::IngestRequest {
            agent_id: "a".into(),
            user_id: "u".into(),
            events: vec![pb::TraceEvent {
                content: "héllo \u{0}".into(),
                trace_type: pb::TraceType::User.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let out = encode_now(&input, &request).unwrap();
        let back: pb::IngestRequest = decode_now(&input, &out).unwrap();
        assert_eq!(back, request);
    }

    proptest! {
        /// Any bytes: a message or INVALID_ARGUMENT, never a panic.
        #[test]
        fn any_body_is_read_or_refused(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let json = Json::new();
            if let Err(e) = decode_now::<pb::IngestRequest>(&ingest_desc(&json), &body) {
                prop_assert_eq!(e.code(), tonic::Code::InvalidArgument);
            }
        }

        /// JSON-looking text made of the grammar's pieces and the
        /// message's field names.
        #[test]
        fn any_json_like_body_is_read_or_refused(
            pieces in proptest::collection::vec(prop_oneof![
                Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"),
                Just("\"agentId\""), Just("\"events\""), Just("\"toolArgs\""),
                Just("\"traceType\""), Just("\"TRACE_TYPE_USER\""), Just("1e999"),
                Just("-0"), Just("null"), Just("\"\\ud800\""), Just("18446744073709551616"),
            ], 0..64)
        ) {
            let json = Json::new();
            let body = pieces.concat();
            if let Err(e) = decode_now::<pb::IngestRequest>(&ingest_desc(&json), body.as_bytes()) {
                prop_assert_eq!(e.code(), tonic::Code::InvalidArgument);
            }
        }
    }
}

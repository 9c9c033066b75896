//! Requests sent byte for byte, for what no generated client would send.

use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

/// Sends `body` as the request of `method` (e.g. `Ingest`) without
/// protobuf encoding; the answer's bytes are dropped ([`RawCodec`] gives
/// them to a caller that wants them).
pub async fn call_raw(channel: Channel, method: &str, body: Vec<u8>) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = format!("/engram.v1.MemoryService/{method}")
        .parse()
        .map_err(|_| tonic::Status::invalid_argument("bad method name"))?;
    if method == "ExportMemory" {
        // A stream of answers, each read to the end.
        let mut answers = grpc
            .server_streaming(tonic::Request::new(body), path, RawCodec)
            .await?
            .into_inner();
        while answers.message().await?.is_some() {}
        return Ok(());
    }
    // ImportMemory's stream of requests is this one message.
    grpc.unary(tonic::Request::new(body), path, RawCodec)
        .await
        .map(|_| ())
}

/// Writes the bytes it is given; reads an answer as its bytes.
#[derive(Debug, Clone, Copy)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        Self
    }

    fn decoder(&mut self) -> Self {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut answer = vec![0; bytes::Buf::remaining(src)];
        bytes::Buf::copy_to_slice(src, &mut answer);
        Ok(Some(answer))
    }
}

//! The protobuf codec of the generated service: prost's, except that a
//! request that does not decode (random bytes, invalid UTF-8 in a string,
//! nesting past prost's recursion limit) is the caller's mistake and is
//! answered INVALID_ARGUMENT, not tonic's default INTERNAL — which would
//! page an operator for a client's bug.
//!
//! The generated clients use the same codec, so for them an undecodable
//! answer is INVALID_ARGUMENT too; only tests and benchmarks use them.

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder};

/// [`ProstCodec`] with decode errors answered INVALID_ARGUMENT.
#[derive(Debug)]
pub struct EngramCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for EngramCodec<T, U> {
    fn default() -> Self {
        Self(ProstCodec::default())
    }
}

impl<T, U> Codec for EngramCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = EngramDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        EngramDecoder(self.0.decoder())
    }
}

#[derive(Debug)]
pub struct EngramDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for EngramDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|e| {
            Status::invalid_argument(format!(
                "the message is not valid protobuf: {}",
                e.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

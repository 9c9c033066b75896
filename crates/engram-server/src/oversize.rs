//! Answers oversized requests with RESOURCE_EXHAUSTED.
//!
//! tonic refuses a request over `max_decoding_message_size` with
//! OUT_OF_RANGE, but the contract says input over a configured limit is
//! RESOURCE_EXHAUSTED. Engram's handlers never answer OUT_OF_RANGE, so
//! every OUT_OF_RANGE leaving the server is tonic's size check: this layer
//! rewrites its code (a trailers-only response carries it in the headers).

use tonic::codegen::http;

use crate::layers::Hook;

const OUT_OF_RANGE: &str = "11";
const RESOURCE_EXHAUSTED: &str = "8";

/// The hook, with `server.max_message_bytes`, which its message names.
#[derive(Debug, Clone, Copy)]
pub struct Oversize {
    pub limit: usize,
}

impl<ReqBody, ResBody> Hook<ReqBody, ResBody> for Oversize {
    type State = usize;
    type Body = ResBody;

    fn before(&self, _: &mut http::Request<ReqBody>) -> Result<usize, http::Response<ResBody>> {
        Ok(self.limit)
    }

    fn after(limit: usize, mut res: http::Response<ResBody>) -> http::Response<ResBody> {
        let headers = res.headers_mut();
        if headers
            .get("grpc-status")
            .is_some_and(|v| v == OUT_OF_RANGE)
        {
            headers.insert(
                "grpc-status",
                http::HeaderValue::from_static(RESOURCE_EXHAUSTED),
            );
            // tonic's own words ("decoded message length too large") name
            // no setting; grpc-message is percent-encoded, and this text
            // needs no escaping but its spaces.
            let message = crate::status::request_too_large(limit)
                .message()
                .replace('%', "%25")
                .replace(' ', "%20");
            if let Ok(value) = http::HeaderValue::from_str(&message) {
                headers.insert("grpc-message", value);
            }
        }
        res
    }
}

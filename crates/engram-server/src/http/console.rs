//! The console (DESIGN §13): a few static files embedded in the binary,
//! served at `/console/` to anyone, as the OpenAPI description is. They
//! hold no data: the page asks the JSON API for it with the bearer token
//! the user gives it, so with auth on nothing shows without one.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

/// The files, by the name the page asks for.
const FILES: [(&str, &str, &str); 5] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../console/index.html"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../../console/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/console.js"),
    ),
    (
        "memory.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/memory.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../console/favicon.svg"),
    ),
];

/// Scripts, styles and calls from this origin only, no framing: the page
/// shows other people's words and holds a token.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The routes, under `/console`.
pub fn routes<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    axum::Router::new()
        .route(
            "/console",
            axum::routing::get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            axum::routing::get(|| async { file("index.html") }),
        )
        .route(
            "/console/{name}",
            axum::routing::get(
                |axum::extract::Path(name): axum::extract::Path<String>| async move { file(&name) },
            ),
        )
}

fn file(name: &str) -> Response {
    let Some((_, kind, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Served with the binary: a new version is a new process.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

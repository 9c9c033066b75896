//! The console's files on the HTTP listener: served to anyone (they hold
//! no data; with auth on, the page's calls need a token), each with its
//! type and a policy that allows nothing from elsewhere. The page itself is
//! tested in a browser (clients/python/tests/test_console.py).

use crate::common::tokens_file;
use crate::json_api::http_server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_without_a_token_and_its_data_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(
        dir.path(),
        "[[tokens]]\nname = \"ops\"\ntoken = \"ops-secret-0123456789\"\nadmin = true\n",
    );
    let server = http_server(&[("ENGRAM__AUTH__TOKENS_FILE", tokens.as_str())]).await;
    let base = format!("http://{}", server.http.expect("the HTTP listener is on"));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: &str| client.get(format!("{base}{path}")).send();

    let moved = get("/console").await.unwrap();
    assert_eq!(moved.status(), 308);
    assert_eq!(moved.headers()["location"], "/console/");

    for (path, kind, has) in [
        ("/console/", "text/html; charset=utf-8", "console.js"),
        (
            "/console/console.js",
            "text/javascript; charset=utf-8",
            "/v1/",
        ),
        (
            "/console/memory.js",
            "text/javascript; charset=utf-8",
            "ListMemories",
        ),
        ("/console/console.css", "text/css; charset=utf-8", ".gauge"),
        ("/console/favicon.svg", "image/svg+xml", "<svg"),
    ] {
        let answer = get(path).await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert_eq!(answer.headers()["content-type"], kind, "{path}");
        let policy = answer.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("script-src 'self'"),
            "{policy}"
        );
        assert_eq!(answer.headers()["x-content-type-options"], "nosniff");
        assert!(answer.text().await.unwrap().contains(has), "{path}");
    }
    assert_eq!(
        get("/console/..%2Fconsole%2Fconsole.js")
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(get("/console/secrets.toml").await.unwrap().status(), 404);

    // The data behind it: a token or nothing.
    let list = |token: Option<&str>| {
        let mut request = client
            .post(format!("{base}/v1/ListAgents"))
            .header("content-type", "application/json")
            .body("{}");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(list(None).await.unwrap().status(), 401);
    assert_eq!(
        list(Some("ops-secret-0123456789")).await.unwrap().status(),
        200
    );
}

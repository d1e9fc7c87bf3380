//! OAuth sign-in for MCP clients, end to end against a real `psbx serve` (no
//! libvirt needed: `sandbox_list` reads the database): the official Python
//! SDK's OAuthClientProvider through the real sign-in page, and every refusal
//! the MCP authorization specification asks for, driven over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use diesel::{Connection, PgConnection, RunQueryDsl};
use psbx_tests::{ServerProcess, TestDatabase, binary};
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// RFC 7636 appendix B: a verifier and its S256 challenge.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const PASSWORD: &str = "correct horse battery";
const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// Dropped in field order: the client's connections, then the server, then
/// its database and data directory.
struct Setup {
    http: Client,
    server: ServerProcess,
    key: String,
    db: TestDatabase,
    dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Self {
        let db = TestDatabase::new();
        let dir = tempfile::tempdir().unwrap();
        let server = ServerProcess::without_boxes(
            dir.path(),
            &db,
            &[("PSBX_OAUTH__LOOPBACK_CLIENT_METADATA", "true")],
        );
        let key = server.first_key().expect("a first key");
        let http = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let s = Self {
            http,
            server,
            key,
            db,
            dir,
        };
        let (ok, _, err) = s.psbx(&["account", "set-password"], Some(PASSWORD));
        assert!(ok, "set-password failed: {err}");
        s
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    /// Runs a `psbx` command on this server's database.
    fn psbx(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut child = Command::new(binary("psbx"))
            .args(["--data-dir", self.dir.path().to_str().unwrap()])
            .args(args)
            .env("DATABASE_URL", self.db.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            let mut input = child.stdin.take().unwrap();
            if let Some(text) = stdin {
                writeln!(input, "{text}").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn sql(&self, statement: &str) -> usize {
        let mut conn = PgConnection::establish(self.db.url()).unwrap();
        diesel::sql_query(statement).execute(&mut conn).unwrap()
    }

    /// POSTs an MCP initialize with this bearer token; returns the status.
    fn mcp(&self, token: &str) -> Response {
        self.http
            .post(self.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(token)
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}
            }))
            .send()
            .unwrap()
    }

    fn register(&self, redirect: &str) -> Response {
        self.http
            .post(self.url("/oauth/register"))
            .json(&json!({"client_name": "test client", "redirect_uris": [redirect]}))
            .send()
            .unwrap()
    }

    fn client_id(&self) -> String {
        let res = self.register(REDIRECT);
        assert_eq!(res.status().as_u16(), 201);
        res.json::<Value>().unwrap()["client_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn authorize(&self, params: &[(&str, &str)]) -> Response {
        self.http
            .get(self.url("/oauth/authorize"))
            .query(params)
            .send()
            .unwrap()
    }

    /// Opens the authorize page for `client_id` and signs in with the password;
    /// returns the answer to the form (a redirect when all went well).
    fn sign_in(&self, client_id: &str, extra: &[(&str, &str)], password: &str) -> Response {
        let mut params = vec![
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT),
            ("state", "st4te"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
        ];
        params.extend_from_slice(extra);
        let page = self.authorize(&params);
        assert_eq!(page.status().as_u16(), 200);
        let cookies: Vec<String> = page
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
            .collect();
        let mut form = hidden_fields(&page.text().unwrap());
        form.push(("account".into(), "default".into()));
        form.push(("password".into(), password.into()));
        form.push(("decision".into(), "approve".into()));
        self.http
            .post(self.url("/oauth/authorize"))
            .header("cookie", cookies.join("; "))
            .form(&form)
            .send()
            .unwrap()
    }

    /// A code for `client_id`, through the sign-in page.
    fn code(&self, client_id: &str) -> String {
        let res = self.sign_in(client_id, &[], PASSWORD);
        assert_eq!(res.status().as_u16(), 303, "{:?}", res.text());
        let location = redirect_params(&res);
        assert_eq!(location["state"], "st4te");
        assert_eq!(location["iss"], self.server.url);
        location["code"].clone()
    }

    fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let res = self
            .http
            .post(self.url("/oauth/token"))
            .form(form)
            .send()
            .unwrap();
        (res.status().as_u16(), res.json().unwrap())
    }

    fn exchange(&self, client_id: &str, code: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("client_id", client_id),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
        ])
    }

    /// Fresh tokens for a fresh client: (client_id, access, refresh).
    fn tokens(&self) -> (String, String, String) {
        let client_id = self.client_id();
        let code = self.code(&client_id);
        let (status, body) = self.exchange(&client_id, &code);
        assert_eq!(status, 200, "{body}");
        (
            client_id,
            body["access_token"].as_str().unwrap().to_owned(),
            body["refresh_token"].as_str().unwrap().to_owned(),
        )
    }

    fn refresh(&self, client_id: &str, refresh: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "refresh_token"),
            ("client_id", client_id),
            ("refresh_token", refresh),
        ])
    }

    fn revoke(&self, token: &str) -> u16 {
        self.http
            .post(self.url("/oauth/revoke"))
            .form(&[("token", token)])
            .send()
            .unwrap()
            .status()
            .as_u16()
    }
}

fn hidden_fields(page: &str) -> Vec<(String, String)> {
    let unescape = |s: &str| {
        s.replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    page.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|rest| {
            let (name, rest) = rest.split_once("\" value=\"").unwrap();
            let (value, _) = rest.split_once('"').unwrap();
            (unescape(name), unescape(value))
        })
        .collect()
}

/// The query parameters of a redirect's `Location`.
fn redirect_params(res: &Response) -> std::collections::HashMap<String, String> {
    let location = res.headers()["location"].to_str().unwrap();
    assert!(location.starts_with(REDIRECT), "{location}");
    reqwest::Url::parse(location)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn run_python_client(s: &Setup, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/oauth_client.py");
    let out = Command::new(psbx_tests::python::python())
        .arg(&script)
        .arg(s.url("/mcp"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the OAuth MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn python_sdk_signs_in_with_a_password_calls_a_tool_and_refreshes() {
    let s = Setup::start();
    let seen = run_python_client(&s, &["password", "default", PASSWORD]);
    // Discovery from the 401, registration, the page, the token: in that order.
    let requests: Vec<&str> = seen["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    let position = |wanted: &str| {
        requests
            .iter()
            .position(|r| *r == wanted)
            .unwrap_or_else(|| panic!("no {wanted} in {requests:?}"))
    };
    assert!(
        position("GET /.well-known/oauth-protected-resource/mcp")
            < position("GET /.well-known/oauth-authorization-server")
    );
    assert!(
        position("GET /.well-known/oauth-authorization-server") < position("POST /oauth/register")
    );
    assert!(position("POST /oauth/register") < position("POST /oauth/token"));
    assert_eq!(seen["page_asks_password"], true, "{seen}");
    assert_eq!(seen["iss"], s.server.url.as_str());
    assert_eq!(seen["redirected_to"], REDIRECT);
    assert!(
        seen["authorization_url"]
            .as_str()
            .unwrap()
            .contains("resource=")
    );
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "sandbox_list")
    );
    assert_eq!(seen["list_error"], false, "{seen}");
    assert_eq!(seen["list"]["boxes"], json!([]), "{seen}");
    assert_eq!(seen["expires_in"], 3600);
    // The refresh rotated both tokens, and the new ones work.
    assert_eq!(seen["list_after_refresh_error"], false, "{seen}");
    let (first_refresh, refresh) = (
        seen["first_refresh_token"].as_str().unwrap(),
        seen["refresh_token"].as_str().unwrap(),
    );
    let access = seen["access_token"].as_str().unwrap();
    assert_ne!(first_refresh, refresh);
    assert_ne!(seen["first_access_token"].as_str().unwrap(), access);
    assert_eq!(s.mcp(access).status().as_u16(), 200);
    // OAuth tokens work on /v1 as on /mcp; so do API keys.
    let v1 = |token: &str| {
        s.http
            .get(s.url("/v1/api-keys"))
            .bearer_auth(token)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(v1(access), 200);
    assert_eq!(v1(&s.key), 200);
    assert_eq!(s.mcp(&s.key).status().as_u16(), 200);
    // Reusing the rotated refresh token fails and revokes the whole family.
    let client_id = seen["client_id"].as_str().unwrap();
    let (status, body) = s.refresh(client_id, first_refresh);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    assert_eq!(s.mcp(access).status().as_u16(), 401);
    let (status, body) = s.refresh(client_id, refresh);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    // No secret reached the log.
    let (clean, log) = s.server.stop();
    assert!(clean, "{log}");
    for secret in [PASSWORD, access, refresh, first_refresh] {
        assert!(!log.contains(secret), "a secret is in the log");
    }
}

#[test]
fn a_login_link_signs_the_browser_in_and_the_page_approves_without_a_password() {
    let s = Setup::start();
    let (ok, out, err) = s.psbx(&["login-link"], None);
    assert!(ok, "{err}");
    let link = out.trim();
    let path = &link[link.find("/oauth/login/").expect(link)..];
    let seen = run_python_client(&s, &["link", &s.url(path)]);
    assert_eq!(seen["page_asks_password"], true, "{seen}");
    assert_eq!(seen["link_returns_to_page"], true, "{seen}");
    assert_eq!(seen["signed_in_page"], true, "{seen}");
    assert_eq!(seen["list_error"], false, "{seen}");
    // The link works once: spent by the confirmation page's POST.
    let again = s.http.get(s.url(path)).send().unwrap();
    assert_eq!(again.status().as_u16(), 404);
    assert!(again.headers().get("set-cookie").is_none());
    let again = s
        .http
        .post(s.url(path))
        .form(&[("csrf", "x")])
        .send()
        .unwrap();
    assert_eq!(again.status().as_u16(), 403, "no cookie of the page");
    // An expired link does not work either.
    let (_, out, _) = s.psbx(&["login-link", "--account", "default"], None);
    let expired = out.trim()[out.trim().find("/oauth/login/").unwrap()..].to_owned();
    s.sql("UPDATE login_links SET expires_at = now() - interval '1 second'");
    assert_eq!(
        s.http
            .get(s.url(&expired))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    let (ok, _, err) = s.psbx(&["login-link", "--account", "nobody"], None);
    assert!(!ok && err.contains("no account named"), "{err}");
    let token = path.trim_start_matches("/oauth/login/");
    let (clean, log) = s.server.stop();
    assert!(clean, "{log}");
    assert!(
        !log.contains(token),
        "the sign-in link is in the log:\n{log}"
    );
}

/// The MCP client's side of a browser sign-in: a loopback listener at the
/// redirect URI (Chromium refuses to navigate to port 9, `ERR_UNSAFE_PORT`)
/// answering every request with a small page; what each request asked for,
/// with its `Referer`, comes out of `seen`.
struct Callback {
    redirect: String,
    seen: std::sync::mpsc::Receiver<(String, Option<String>)>,
}

impl Callback {
    fn listen() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let redirect = format!("http://{}/callback", listener.local_addr().unwrap());
        let (tx, seen) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(16) {
                let Ok(mut stream) = stream else { break };
                let mut buf = [0u8; 8192];
                let n = stream.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let referer = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("referer:")
                            .map(str::to_owned)
                    })
                    .map(|r| r.trim().to_owned());
                let body = "<p id=\"done\">signed in</p>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                if tx.send((target, referer)).is_err() {
                    break;
                }
            }
        });
        Self { redirect, seen }
    }
}

/// A client registered with `redirect`.
fn browser_client(s: &Setup, redirect: &str) -> String {
    let res = s.register(redirect);
    assert_eq!(res.status().as_u16(), 201);
    res.json::<Value>().unwrap()["client_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The client's code exchanged for tokens.
fn browser_exchange(s: &Setup, client_id: &str, redirect: &str, code: &str) -> (u16, Value) {
    s.token(&[
        ("grant_type", "authorization_code"),
        ("client_id", client_id),
        ("code", code),
        ("redirect_uri", redirect),
        ("code_verifier", VERIFIER),
    ])
}

/// The authorize link an MCP client opens, for `client_id`.
fn authorize_link(s: &Setup, client_id: &str, redirect: &str) -> String {
    let mut url = reqwest::Url::parse(&s.url("/oauth/authorize")).unwrap();
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", redirect)
        .append_pair("state", "st4te")
        .append_pair("code_challenge", CHALLENGE)
        .append_pair("code_challenge_method", "S256");
    url.to_string()
}

/// What a person does in Chromium: the sign-in page with a password gives a
/// code that the client exchanges for a token, and a form of the same fields
/// posted from another site (hiding its origin: `Origin: null`) is refused.
/// Chromium sends `Sec-Fetch-Site` and, on a page with a no-referrer policy,
/// `Origin: null`; the check once refused every such sign-in.
#[test]
fn a_person_signs_in_with_a_password_in_chromium_and_the_client_gets_a_code() {
    let s = Setup::start();
    let callback = Callback::listen();
    let client_id = browser_client(&s, &callback.redirect);
    let seen = psbx_tests::browser::run_json(
        "oauth.mjs",
        &json!({
            "authorizeUrl": authorize_link(&s, &client_id, &callback.redirect),
            "redirectUri": callback.redirect,
            "account": "default",
            "password": PASSWORD,
            "crossSite": true,
        }),
    );
    assert_eq!(seen["ok"], true, "{seen}");
    assert_eq!(seen["error"], Value::Null, "{seen}");
    assert_eq!(seen["state"], "st4te", "{seen}");
    assert_eq!(seen["iss"], s.server.url.as_str(), "{seen}");
    let (target, referer) = callback.seen.recv().unwrap();
    assert!(target.starts_with("/callback?"), "{target}");
    assert_eq!(referer, None, "the sign-in page's URL went to the client");
    let code = seen["code"].as_str().expect("a code");
    let (status, body) = browser_exchange(&s, &client_id, &callback.redirect, code);
    assert_eq!(status, 200, "{body}");
    assert!(body["access_token"].is_string(), "{body}");
    let cross = &seen["crossSite"];
    assert_eq!(cross["status"], 403, "{seen}");
    assert!(
        cross["text"].as_str().unwrap().contains("another site"),
        "{seen}"
    );
    let (clean, log) = s.server.stop();
    assert!(clean, "{log}");
    assert!(
        log.contains(r#"Origin is "null" and Sec-Fetch-Site is "cross-site""#),
        "the refusal's reason is not in the log:\n{log}"
    );
    assert!(!log.contains(PASSWORD), "the password is in the log");
}

/// The login link's confirmation page, then the authorize page, in Chromium:
/// both forms are accepted from the browser that shows them.
#[test]
fn a_login_link_signs_chromium_in_and_the_authorize_page_approves() {
    let s = Setup::start();
    let callback = Callback::listen();
    let client_id = browser_client(&s, &callback.redirect);
    let (ok, out, err) = s.psbx(&["login-link"], None);
    assert!(ok, "{err}");
    let seen = psbx_tests::browser::run_json(
        "oauth.mjs",
        &json!({
            "authorizeUrl": authorize_link(&s, &client_id, &callback.redirect),
            "redirectUri": callback.redirect,
            "loginLink": s.url(&out.trim()[out.trim().find("/oauth/login/").expect(&out)..]),
        }),
    );
    assert_eq!(seen["linkSignedIn"], true, "{seen}");
    let code = seen["code"].as_str().expect("a code");
    let (status, body) = browser_exchange(&s, &client_id, &callback.redirect, code);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn discovery_documents_and_the_401_point_to_each_other() {
    let s = Setup::start();
    let res = s
        .http
        .post(s.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let challenge = res.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    let metadata_url = s.url("/.well-known/oauth-protected-resource/mcp");
    assert!(
        challenge.starts_with("Bearer ")
            && challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert_eq!(
        res.json::<Value>().unwrap()["error"]["code"],
        "unauthorized"
    );
    let bad = s.mcp("psbx_at_notatoken");
    assert_eq!(bad.status().as_u16(), 401);
    assert!(
        bad.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\"")
    );

    // /v1's 401 points to its own resource metadata.
    let res = s.http.get(s.url("/v1/boxes")).send().unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let v1_metadata = s.url("/.well-known/oauth-protected-resource/v1");
    let challenge = res.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains(&format!("resource_metadata=\"{v1_metadata}\"")),
        "{challenge}"
    );
    let prm: Value = s.http.get(&v1_metadata).send().unwrap().json().unwrap();
    assert_eq!(prm["resource"], s.url("/v1"));
    assert_eq!(prm["authorization_servers"], json!([s.server.url]));

    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let prm: Value = s.http.get(s.url(path)).send().unwrap().json().unwrap();
        assert_eq!(prm["resource"], s.url("/mcp"));
        assert_eq!(prm["authorization_servers"], json!([s.server.url]));
        assert_eq!(prm["bearer_methods_supported"], json!(["header"]));
    }
    let asm: Value = s
        .http
        .get(s.url("/.well-known/oauth-authorization-server"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(asm["issuer"], s.server.url.as_str());
    assert_eq!(asm["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(asm["authorization_response_iss_parameter_supported"], true);
    assert_eq!(asm["client_id_metadata_document_supported"], true);
    assert_eq!(asm["token_endpoint"], s.url("/oauth/token"));
    assert_eq!(asm["registration_endpoint"], s.url("/oauth/register"));
    assert_eq!(asm["revocation_endpoint"], s.url("/oauth/revoke"));
}

#[test]
fn registration_and_the_authorize_page_refuse_what_they_must() {
    let s = Setup::start();
    // Plain http redirect URIs only to this machine.
    let res = s.register("http://evil.example/callback");
    assert_eq!(res.status().as_u16(), 400);
    let body: Value = res.json().unwrap();
    assert_eq!(body["error"], "invalid_redirect_uri");
    let why = body["error_description"].as_str().unwrap();
    assert!(
        why.contains("http://evil.example/callback") && why.contains("localhost"),
        "{why}"
    );
    assert_eq!(s.register("myapp://cb").status().as_u16(), 400);
    assert_eq!(s.register("https://app.example/cb").status().as_u16(), 201);

    let client_id = s.client_id();
    let base = |extra: &[(&'static str, &'static str)]| {
        let mut p = vec![
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "xyz"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
        ];
        for (k, v) in extra {
            p.retain(|(name, _)| name != k);
            p.push((*k, *v));
        }
        s.authorize(&p)
    };
    // Before the redirect URI is trusted, errors stay on the page.
    for bad in [
        ("redirect_uri", "http://127.0.0.1:9/other"),
        ("client_id", "client_unknown"),
    ] {
        let res = base(&[bad]);
        assert_eq!(res.status().as_u16(), 400, "{bad:?}");
        assert!(res.headers().get("location").is_none(), "{bad:?}");
        assert!(res.text().unwrap().contains("not"), "{bad:?}");
    }
    // After, they go back to the client.
    for (bad, error) in [
        (("code_challenge_method", "plain"), "invalid_request"),
        (("resource", "http://other.example/mcp"), "invalid_target"),
        (("response_type", "token"), "unsupported_response_type"),
    ] {
        let res = base(&[bad]);
        assert_eq!(res.status().as_u16(), 303, "{bad:?}");
        let params = redirect_params(&res);
        assert_eq!(params["error"], error, "{bad:?}");
        assert_eq!(params["state"], "xyz");
        assert_eq!(params["iss"], s.server.url);
    }
    let res = s.authorize(&[
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", REDIRECT),
    ]);
    assert_eq!(redirect_params(&res)["error"], "invalid_request", "no PKCE");

    // A wrong password shows the page again; a form without its cookie is refused.
    let res = s.sign_in(&client_id, &[], "wrong password");
    assert_eq!(res.status().as_u16(), 401);
    assert!(res.headers().get("location").is_none());
    let page = base(&[]).text().unwrap();
    let mut form = hidden_fields(&page);
    form.push(("account".into(), "default".into()));
    form.push(("password".into(), PASSWORD.into()));
    form.push(("decision".into(), "approve".into()));
    let forged = s
        .http
        .post(s.url("/oauth/authorize"))
        .form(&form)
        .send()
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    assert!(forged.headers().get("location").is_none());
    // Deny goes back with access_denied.
    let page = base(&[]);
    let cookie = page.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let mut form = hidden_fields(&page.text().unwrap());
    form.push(("decision".into(), "deny".into()));
    let denied = s
        .http
        .post(s.url("/oauth/authorize"))
        .header("cookie", cookie)
        .form(&form)
        .send()
        .unwrap();
    assert_eq!(redirect_params(&denied)["error"], "access_denied");
}

#[test]
fn tokens_are_refused_when_reused_expired_revoked_or_for_another_resource() {
    let s = Setup::start();
    let client_id = s.client_id();

    // A code works once; its second use revokes what the first one got.
    let code = s.code(&client_id);
    let (status, first) = s.exchange(&client_id, &code);
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["token_type"], "Bearer");
    assert_eq!(first["expires_in"], 3600);
    let access = first["access_token"].as_str().unwrap();
    assert_eq!(s.mcp(access).status().as_u16(), 200);
    let (status, again) = s.exchange(&client_id, &code);
    assert_eq!(
        (status, again["error"].as_str()),
        (400, Some("invalid_grant")),
        "{again}"
    );
    assert_eq!(
        s.mcp(access).status().as_u16(),
        401,
        "the reused code's tokens still work"
    );

    // PKCE: a wrong verifier, another client, another redirect URI.
    let code = s.code(&client_id);
    let (status, body) = s.token(&[
        ("grant_type", "authorization_code"),
        ("client_id", &client_id),
        ("code", &code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", &"x".repeat(43)),
    ]);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    let other_client = s.client_id();
    let code = s.code(&client_id);
    let (status, body) = s.exchange(&other_client, &code);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    // An expired code (codes last ten minutes).
    let code = s.code(&client_id);
    s.sql("UPDATE oauth_codes SET expires_at = now() - interval '1 second' WHERE used_at IS NULL");
    let (status, body) = s.exchange(&client_id, &code);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{body}"
    );

    // A token stored for another resource is refused on /mcp.
    let (_, access, _) = s.tokens();
    assert_eq!(s.mcp(&access).status().as_u16(), 200);
    s.sql("UPDATE oauth_grants SET resource = 'http://other.example/mcp'");
    assert_eq!(s.mcp(&access).status().as_u16(), 401);

    // An expired token is refused; its refresh token still gets a new one.
    let (client_id, access, refresh) = s.tokens();
    assert_eq!(s.mcp(&access).status().as_u16(), 200);
    assert!(
        s.sql(
            "UPDATE oauth_tokens SET expires_at = now() - interval '1 second' WHERE kind = 'access'"
        ) > 0
    );
    assert_eq!(s.mcp(&access).status().as_u16(), 401);
    let (status, body) = s.refresh(&client_id, &refresh);
    assert_eq!(status, 200, "{body}");
    let (access, refresh) = (
        body["access_token"].as_str().unwrap().to_owned(),
        body["refresh_token"].as_str().unwrap().to_owned(),
    );
    assert_eq!(s.mcp(&access).status().as_u16(), 200);

    // Revocation: the access token at once; a refresh token with its family.
    assert_eq!(s.revoke(&access), 200);
    assert_eq!(s.mcp(&access).status().as_u16(), 401);
    let (status, body) = s.refresh(&client_id, &refresh);
    assert_eq!(status, 200, "{body}");
    let (access, refresh) = (
        body["access_token"].as_str().unwrap().to_owned(),
        body["refresh_token"].as_str().unwrap().to_owned(),
    );
    assert_eq!(s.revoke(&refresh), 200);
    assert_eq!(s.mcp(&access).status().as_u16(), 401);
    let (status, body) = s.refresh(&client_id, &refresh);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    assert_eq!(
        s.revoke("psbx_at_unknown"),
        200,
        "RFC 7009: unknown tokens are fine"
    );
    // Malformed requests get RFC 6749 errors too.
    let res = s
        .http
        .post(s.url("/oauth/token"))
        .json(&json!({"grant_type": "refresh_token"}))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    assert_eq!(res.json::<Value>().unwrap()["error"], "invalid_request");
    let (status, body) = s.token(&[("grant_type", "password"), ("client_id", &client_id)]);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );

    // Tokens are stored as their SHA-256.
    let mut conn = PgConnection::establish(s.db.url()).unwrap();
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let found: N = diesel::sql_query(
        "SELECT count(*) AS n FROM oauth_tokens WHERE token_sha256 = sha256($1::bytea)",
    )
    .bind::<diesel::sql_types::Bytea, _>(access.as_bytes())
    .get_result(&mut conn)
    .unwrap();
    assert_eq!(found.n, 1);
}

#[test]
fn an_oauth_token_works_on_v1_for_its_own_account_only() {
    let s = Setup::start();
    // Another account with a box, and a box of the signed-in account.
    s.sql("INSERT INTO accounts (id, name) VALUES ('acct_other1', 'other')");
    let default: Value = s
        .http
        .get(s.url("/v1/boxes"))
        .bearer_auth(&s.key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(default["boxes"], json!([]), "{default}");
    for (id, account) in [("box_mine1", "default"), ("box_theirs1", "other")] {
        s.sql(&format!(
            "INSERT INTO boxes (id, account_id, host, state, image, size, vcpus, memory_mib, \
             disk_gb, keep_secs, stopped_at) SELECT '{id}', id, 'test:///', 'stopped', 'debian', 1, \
             1, 1024, 8, 0, now() FROM accounts WHERE name = '{account}'"
        ));
    }
    let list = |token: &str| {
        let res = s
            .http
            .get(s.url("/v1/boxes"))
            .bearer_auth(token)
            .send()
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json::<Value>().unwrap())
    };
    let ids = |body: &Value| -> Vec<String> {
        body["boxes"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
            .iter()
            .map(|b| b["id"].as_str().unwrap().to_owned())
            .collect()
    };
    // A token from the real sign-in (issued for /mcp) lists the account's boxes.
    let (_, access, _) = s.tokens();
    let (status, body) = list(&access);
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["box_mine1"]);
    // A token asked for /v1 (RFC 8707) works on both.
    let client_id = s.client_id();
    let v1_resource = s.url("/v1");
    let res = s.sign_in(&client_id, &[("resource", v1_resource.as_str())], PASSWORD);
    assert_eq!(res.status().as_u16(), 303);
    let code = redirect_params(&res)["code"].clone();
    let exchange = |resource: &str| {
        s.token(&[
            ("grant_type", "authorization_code"),
            ("client_id", &client_id),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
            ("resource", resource),
        ])
    };
    // Another server's resource is refused before the code is looked at.
    let (status, body) = exchange("http://other.example/v1");
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_target")),
        "{body}"
    );
    // A trailing slash is the same resource.
    let (status, body) = exchange(&format!("{v1_resource}/"));
    assert_eq!(status, 200, "{body}");
    let v1_token = body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(ids(&list(&v1_token).1), ["box_mine1"]);
    assert_eq!(s.mcp(&v1_token).status().as_u16(), 200);
    // Tokens issued for another server's resource are refused on both.
    s.sql("UPDATE oauth_grants SET resource = 'http://other.example/v1'");
    let (status, body) = list(&v1_token);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    assert_eq!(list(&access).0, 401);
    assert_eq!(s.mcp(&v1_token).status().as_u16(), 401);
    // Another server's resource cannot be asked for either.
    let res = s.authorize(&[
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("resource", "http://other.example/v1"),
    ]);
    assert_eq!(redirect_params(&res)["error"], "invalid_target");
}

/// Serves one client metadata document on loopback, for a few requests.
fn serve_document(body: impl Fn(&str) -> String + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/client.json", listener.local_addr().unwrap());
    let own = url.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let doc = body(&own);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{doc}",
                doc.len()
            );
        }
    });
    url
}

#[test]
fn client_metadata_documents_are_fetched_and_checked() {
    let s = Setup::start();
    let good = serve_document(|url| {
        json!({"client_id": url, "client_name": "Document Client", "redirect_uris": [REDIRECT]})
            .to_string()
    });
    let page = s.authorize(&[
        ("response_type", "code"),
        ("client_id", &good),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ]);
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().unwrap().contains("Document Client"));
    let code = s.code(&good);
    let (status, body) = s.exchange(&good, &code);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.mcp(body["access_token"].as_str().unwrap())
            .status()
            .as_u16(),
        200
    );

    let impostor = serve_document(|_| {
        json!({"client_id": "https://other.example/client.json", "redirect_uris": [REDIRECT]})
            .to_string()
    });
    let page = s.authorize(&[
        ("response_type", "code"),
        ("client_id", &impostor),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ]);
    assert_eq!(page.status().as_u16(), 400);
    assert!(page.text().unwrap().contains("another client_id"));
}

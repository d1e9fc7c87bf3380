//! The environment's AWS role inside the box (environments.txt, "AWS
//! permissions inside a box"): boxd serves the role's temporary credentials
//! the way ECS's agent does for a task role — `GET
//! http://169.254.170.2/v1/credentials` with the `Authorization` header
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN` names, answered with
//! `{AccessKeyId, SecretAccessKey, Token, Expiration, RoleArn}` — so SDKs
//! and the CLI find them through `AWS_CONTAINER_CREDENTIALS_FULL_URI` with
//! no code change. The address is put on `lo`: the box's programs reach it,
//! its containers too (through their bridge, as a local address of the
//! box), nothing outside the box does.
//!
//! Credentials come on demand: when none are held, or those held have less
//! than a quarter of their life (at most 15 minutes) left, boxd asks the
//! server for a fresh identity token (an `aws:token` stream) and trades it
//! with STS (`sts`). What it serves therefore always has that margin left,
//! and SDKs, which refresh shortly before the expiry they were given, come
//! back in time. Nothing is written to disk but the claim's variables
//! (`kept`); credentials live in boxd's memory only.

pub mod sts;

use crate::kept;
use crate::uplink::Uplink;
use bytes::Bytes;
use chrono::Utc;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use psbx_wire::boxd::{
    AWS_CREDENTIALS_ADDR, AWS_CREDENTIALS_PATH, AWS_TOKEN_TARGET, AwsToken, BoxAws,
};
use serde_json::json;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use sts::{Credentials, StsError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What boxd keeps of the role for a restart in the same boot.
pub const KEPT: &str = "/run/psbx/aws.json";
/// How long a token request waits for a session with the server (after a
/// thaw it takes a few seconds to come back).
const SESSION_WAIT: Duration = Duration::from_secs(10);
/// How long the server has to answer a token request.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// The most that is left of credentials when boxd replaces them.
const MAX_MARGIN: i64 = 15 * 60;
/// The largest token answer read.
const MAX_TOKEN: u64 = 64 * 1024;

/// The role's credentials as this box holds them.
pub struct Role {
    authorization: String,
    uplink: Uplink,
    client: sts::Client,
    /// The credentials held and the seconds they were given for.
    held: tokio::sync::Mutex<Option<(Credentials, i64)>>,
}

/// The one role of this boot, once a claim (or a restart) brought it.
static ROLE: OnceLock<Arc<Role>> = OnceLock::new();

/// Why the credentials endpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error("cannot put {AWS_CREDENTIALS_ADDR} on lo: {0}")]
    Address(String),
    #[error("cannot listen on {AWS_CREDENTIALS_ADDR}:80: {0}")]
    Listen(std::io::Error),
    #[error("cannot set up TLS for STS: {0}")]
    Tls(rustls::Error),
}

/// Opens the credentials endpoint for `aws` (once a boot: a second claim
/// or a restored one finds it open) and keeps it for a restarted boxd.
pub async fn start(aws: &BoxAws, uplink: &Uplink) -> Result<(), RoleError> {
    if ROLE.get().is_some() {
        return Ok(());
    }
    let listener = listen().await?;
    let role = Arc::new(Role {
        authorization: aws.authorization.clone(),
        uplink: uplink.clone(),
        client: crate::privnet::external::upstream_client(
            crate::privnet::external::system_roots(),
            Duration::from_secs(10),
        )
        .map_err(RoleError::Tls)?,
        held: tokio::sync::Mutex::new(None),
    });
    if ROLE.set(role.clone()).is_err() {
        return Ok(());
    }
    kept::keep(Path::new(KEPT), aws, "the AWS role");
    tokio::spawn(serve(role, listener));
    println!(
        "boxd: serving the AWS role's credentials on http://{AWS_CREDENTIALS_ADDR}{AWS_CREDENTIALS_PATH}"
    );
    Ok(())
}

/// At start: the role an earlier boxd of this boot served, if any.
pub fn restore() -> Option<BoxAws> {
    let path = Path::new(KEPT);
    kept::usable(path, kept::read(path))
}

async fn listen() -> Result<tokio::net::TcpListener, RoleError> {
    crate::privnet::rules::on_loopback(&format!("{AWS_CREDENTIALS_ADDR}/32"))
        .await
        .map_err(RoleError::Address)?;
    tokio::net::TcpListener::bind((AWS_CREDENTIALS_ADDR, 80))
        .await
        .map_err(RoleError::Listen)
}

async fn serve(role: Arc<Role>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let role = role.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |r| answer(role.clone(), r));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// One request for the credentials.
async fn answer(
    role: Arc<Role>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != AWS_CREDENTIALS_PATH {
        return Ok(refusal(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the credentials are at {AWS_CREDENTIALS_PATH}"),
        ));
    }
    if request.method() != Method::GET {
        return Ok(refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the credentials are read with GET",
        ));
    }
    let given = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    if given != Some(role.authorization.as_bytes()) {
        return Ok(refusal(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "send the value of AWS_CONTAINER_AUTHORIZATION_TOKEN (in /work/.sbx/env/<service>.env) \
             as the Authorization header",
        ));
    }
    Ok(match role.credentials().await {
        Ok(c) => json_response(
            StatusCode::OK,
            &json!({
                "AccessKeyId": c.access_key_id,
                "SecretAccessKey": c.secret_access_key,
                "Token": c.session_token,
                "Expiration": c.expiration_text,
                "RoleArn": c.role_arn,
            }),
        ),
        Err(e) => {
            eprintln!("boxd: no AWS credentials: {e}");
            let code = match &e {
                Failure::Sts(StsError::Refused { code, .. }) => code.clone(),
                _ => "CredentialsUnavailable".to_owned(),
            };
            refusal(StatusCode::BAD_GATEWAY, &code, &e.to_string())
        }
    })
}

/// Why no credentials could be had.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("no identity token from psbx: {0}")]
    Token(String),
    #[error(transparent)]
    Sts(#[from] StsError),
}

impl Role {
    /// The credentials held, or fresh ones when those are near their end.
    async fn credentials(&self) -> Result<Credentials, Failure> {
        let mut held = self.held.lock().await;
        if let Some((c, lifetime)) = held.as_ref() {
            let margin = (lifetime / 4).min(MAX_MARGIN);
            if (c.expiration - Utc::now()).num_seconds() > margin {
                return Ok(c.clone());
            }
        }
        let token = self.token().await?;
        let fresh = sts::assume(&self.client, &token).await?;
        let lifetime = (fresh.expiration - Utc::now()).num_seconds();
        *held = Some((fresh.clone(), lifetime));
        Ok(fresh)
    }

    /// A fresh identity token and what to trade it for, from the server.
    async fn token(&self) -> Result<AwsToken, Failure> {
        let failed = |e: String| Failure::Token(e);
        let live = self
            .uplink
            .current(SESSION_WAIT)
            .await
            .ok_or_else(|| failed("the box is not connected to psbx".into()))?;
        let asked = async {
            let mut stream = live
                .session
                .open(AWS_TOKEN_TARGET)
                .await
                .map_err(|e| e.to_string())?;
            stream.shutdown().await.map_err(|e| e.to_string())?;
            let mut body = Vec::new();
            (&mut stream)
                .take(MAX_TOKEN)
                .read_to_end(&mut body)
                .await
                .map_err(|e| e.to_string())?;
            serde_json::from_slice::<AwsToken>(&body).map_err(|e| e.to_string())
        };
        tokio::time::timeout(TOKEN_TIMEOUT, asked)
            .await
            .map_err(|_| failed(format!("no answer in {} s", TOKEN_TIMEOUT.as_secs())))?
            .map_err(failed)
    }
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn refusal(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({"code": code, "message": message}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The fake STS's URL, for the server's `aws:token` answers.
    static STS: OnceLock<String> = OnceLock::new();
    static ISSUED: AtomicU32 = AtomicU32::new(0);

    /// An STS on loopback whose credentials last 3 s, numbered.
    async fn fake_sts() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let service = hyper::service::service_fn(|r: Request<Incoming>| async move {
                    use http_body_util::BodyExt;
                    let body = r.into_body().collect().await.unwrap().to_bytes();
                    let form = String::from_utf8(body.to_vec()).unwrap();
                    assert!(form.contains("WebIdentityToken=signed-token"), "{form}");
                    let n = ISSUED.fetch_add(1, Ordering::SeqCst) + 1;
                    let expires =
                        (Utc::now() + chrono::Duration::seconds(3)).format("%Y-%m-%dT%H:%M:%SZ");
                    let xml = format!(
                        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>\
                         <Credentials><AccessKeyId>AKID{n}</AccessKeyId><SecretAccessKey>s</SecretAccessKey>\
                         <SessionToken>t</SessionToken><Expiration>{expires}</Expiration></Credentials>\
                         </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
                    );
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(xml))))
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        url
    }

    /// The server's side: a token for every `aws:token` stream.
    fn server(incoming: psbx_wire::mux::Incoming) {
        tokio::spawn(async move {
            assert_eq!(incoming.target(), AWS_TOKEN_TARGET);
            let token = AwsToken {
                token: "signed-token".into(),
                role_arn: "arn:aws:iam::123456789012:role/box".into(),
                session_name: "psbx-box_1".into(),
                sts_url: STS.get().unwrap().clone(),
                duration_seconds: 3,
            };
            let mut stream = incoming.accept();
            let mut nothing = Vec::new();
            stream.read_to_end(&mut nothing).await.unwrap();
            stream
                .write_all(&serde_json::to_vec(&token).unwrap())
                .await
                .unwrap();
            stream.shutdown().await.unwrap();
        });
    }

    async fn get(
        role: &Arc<Role>,
        path: &str,
        authorization: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        use http_body_util::BodyExt;
        let mut request = Request::get(path);
        if let Some(a) = authorization {
            request = request.header("authorization", a);
        }
        // `answer` takes hyper's own body type: go through a real connection.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let role = role.clone();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(move |r| answer(role.clone(), r));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
        let tcp = tokio::net::TcpStream::connect(at).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(conn);
        let answer = send
            .send_request(
                request
                    .header("host", "x")
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = answer.status();
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn credentials_are_served_to_the_token_held_and_replaced_near_their_end() {
        STS.set(fake_sts().await).unwrap();
        let (uplink, _server) = crate::uplink::test_server(server).await;
        let role = Arc::new(Role {
            authorization: "box-secret".into(),
            uplink,
            client: crate::privnet::external::upstream_client(
                rustls::RootCertStore::empty(),
                Duration::from_secs(5),
            )
            .unwrap(),
            held: tokio::sync::Mutex::new(None),
        });

        let (status, body) = get(&role, AWS_CREDENTIALS_PATH, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("AWS_CONTAINER_AUTHORIZATION_TOKEN")
        );
        let (status, _) = get(&role, AWS_CREDENTIALS_PATH, Some("wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _) = get(&role, "/v2/credentials", Some("box-secret")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            ISSUED.load(Ordering::SeqCst),
            0,
            "refused requests ask nothing"
        );

        let (status, first) = get(&role, AWS_CREDENTIALS_PATH, Some("box-secret")).await;
        assert_eq!(status, StatusCode::OK, "{first}");
        assert_eq!(first["AccessKeyId"], "AKID1");
        assert_eq!(first["RoleArn"], "arn:aws:iam::123456789012:role/box");
        assert!(first["Token"].is_string() && first["Expiration"].is_string());
        // Held while they last...
        let (_, again) = get(&role, AWS_CREDENTIALS_PATH, Some("box-secret")).await;
        assert_eq!(again["AccessKeyId"], "AKID1");
        // ...and replaced at their end.
        tokio::time::sleep(Duration::from_millis(3100)).await;
        let (_, later) = get(&role, AWS_CREDENTIALS_PATH, Some("box-secret")).await;
        assert_eq!(later["AccessKeyId"], "AKID2");
        assert_eq!(ISSUED.load(Ordering::SeqCst), 2);
    }
}

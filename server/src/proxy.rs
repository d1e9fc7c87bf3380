//! One request forwarded over a wire stream as HTTP/1.1 (hyper's client
//! connection on the stream), and its answer streamed back: a box URL's
//! request over a `port:<n>` stream of the box's channel
//! (`box_urls/mod.rs`), and a request for a box on another node over an
//! `http` stream of the peer link (`cluster/forward.rs`). What differs per
//! hop is a [`Hop`]: what it holds until the answer ends, its time limits,
//! its error pages, and whether cookies are kept to their host.
//!
//! Bodies are never held whole (flow control of the wire stream and of the
//! client's connection sets the pace), `101 Switching Protocols` turns both
//! into a byte pipe (WebSocket and other upgrades), but only when the client
//! asked for that very upgrade: any other `101` is a bad answer (502), so
//! that a box cannot turn a plain request into a tunnel through a front
//! proxy.
//!
//! Quiet connections do not hold the stream: a request body that sends
//! nothing for the hop's body idle time is cut (408), an upgraded connection
//! with no byte either way for its WebSocket idle time is closed, and a box
//! counts the connection as activity only while bytes flow ([`Traffic`]).
//!
//! Headers pass as they are except the hop-by-hop ones (RFC 9110 §7.6.1:
//! `Connection` and what it names, `Keep-Alive`, `TE`, `Trailer`,
//! `Transfer-Encoding`, `Upgrade` outside an upgrade, `Proxy-*`) and the
//! forwarding headers psbx sets: `X-Forwarded-For` (the client's address,
//! appended to the list a trusted proxy sent), `X-Forwarded-Proto` and
//! `X-Forwarded-Host`. A request over HTTP/2 gets the `Host` its
//! `:authority` names.
//!
//! A box's `Set-Cookie` headers lose their `Domain` attribute
//! ([`without_domain`]; [`Hop::own_cookies`]): a cookie a box sets is its
//! host's only, never every box's under the box domain (scripts in the page
//! can still set one; README "Box URLs"). Hand-written rather than the
//! `cookie` crate's parse-and-print, which would drop attributes it does not
//! know.

use actix_web::http::header::{self as actix_header, HeaderMap as ActixHeaders};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Either, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use psbx_actors::boxes::Traffic;
use psbx_wire::mux::Stream;
use std::cell::Cell;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Headers that end at each hop.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
/// Bytes read at a time from an upgraded connection.
const UPGRADED_READ: usize = 16 * 1024;

/// Who asked, as the forwarding headers tell it.
pub struct Forwarding {
    /// The address that connected to psbx.
    pub peer: Option<IpAddr>,
    /// Whether the peer is a trusted proxy (its forwarding headers are kept).
    pub peer_is_proxy: bool,
    /// Whether the client reached psbx over TLS.
    pub secure: bool,
    /// The Host the client asked for.
    pub host: String,
}

/// What one kind of hop holds, allows and answers.
pub trait Hop: 'static {
    /// The box's activity marker, told of each byte (box URLs).
    fn traffic(&self) -> Option<Traffic>;
    /// How long a request body may send nothing, and an upgraded
    /// connection carry nothing either way.
    fn idle(&self) -> (Duration, Duration);
    /// Whether `Set-Cookie` loses its `Domain` (a box's answer).
    fn own_cookies(&self) -> bool;
    /// The answer when the other end gave no usable HTTP answer.
    fn bad_answer(&self) -> HttpResponse;
    /// The answer when the request's body stalled past its idle time.
    fn body_stalled(&self) -> HttpResponse;
}

type LocalBody =
    futures_util::stream::LocalBoxStream<'static, Result<Frame<Bytes>, std::io::Error>>;
type RequestBody = Either<Empty<Bytes>, StreamBody<LocalBody>>;

/// Forwards the request on `stream`; `hop` is held until the answer ends.
pub async fn forward<H: Hop>(
    req: &HttpRequest,
    payload: web::Payload,
    stream: Stream,
    who: &Forwarding,
    hop: H,
) -> HttpResponse {
    let upgrade = upgrade_of(req.headers());
    let traffic = hop.traffic();
    let (body_idle, websocket_idle) = hop.idle();
    let stalled = Rc::new(Cell::new(false));
    let (body, payload): (RequestBody, Option<web::Payload>) =
        if upgrade.is_some() || !has_body(req) {
            (Either::Left(Empty::new()), Some(payload))
        } else {
            let body = body_of(payload, body_idle, traffic.clone(), stalled.clone());
            (Either::Right(StreamBody::new(body)), None)
        };
    let request = match request_of(req, body, upgrade.as_deref(), who) {
        Ok(request) => request,
        Err(e) => {
            tracing::debug!(error = %e, "a request that cannot be forwarded");
            return hop.bad_answer();
        }
    };
    let (mut sender, connection) = match hyper::client::conn::http1::Builder::new()
        .handshake::<_, RequestBody>(TokioIo::new(stream))
        .await
    {
        Ok(pair) => pair,
        Err(_) => return hop.bad_answer(),
    };
    actix_web::rt::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let mut response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(_) if stalled.get() => return hop.body_stalled(),
        Err(e) => {
            tracing::debug!(error = %e, "the other end gave no HTTP answer");
            return hop.bad_answer();
        }
    };
    let status = actix_web::http::StatusCode::from_u16(response.status().as_u16())
        .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
    let mut builder = HttpResponse::build(status);
    let switching = status == actix_web::http::StatusCode::SWITCHING_PROTOCOLS;
    let named = connection_names(response.headers());
    for (name, value) in response.headers() {
        let lower = name.as_str();
        if ends_here(lower, &named) {
            continue;
        }
        let value = if name == hyper::header::SET_COOKIE && hop.own_cookies() {
            without_domain(value.as_bytes())
        } else {
            value.as_bytes().to_vec()
        };
        if let (Ok(name), Ok(value)) = (
            actix_header::HeaderName::from_bytes(name.as_ref()),
            actix_header::HeaderValue::from_bytes(&value),
        ) {
            builder.append_header((name, value));
        }
    }
    if switching {
        // Only the upgrade the client asked for, to the protocol it named.
        let protocol = upgrade_value(response.headers()).filter(|p| {
            upgrade
                .as_deref()
                .is_some_and(|u| u.eq_ignore_ascii_case(p))
        });
        let (Some(protocol), Some(payload)) = (protocol, payload) else {
            tracing::debug!("a 101 the client did not ask for");
            return hop.bad_answer();
        };
        let upgraded = match hyper::upgrade::on(&mut response).await {
            Ok(upgraded) => upgraded,
            Err(_) => return hop.bad_answer(),
        };
        builder.upgrade(protocol);
        return builder.streaming(pipe(TokioIo::new(upgraded), payload, hop, websocket_idle));
    }
    let length = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if status == actix_web::http::StatusCode::NO_CONTENT
        || status == actix_web::http::StatusCode::NOT_MODIFIED
        || status.is_informational()
    {
        return builder.body(actix_web::body::None::new());
    }
    let body = response.into_body().into_data_stream().map(move |chunk| {
        if let Some(traffic) = hop.traffic() {
            traffic.saw();
        }
        chunk.map_err(|e| std::io::Error::other(e.to_string()))
    });
    if let Some(length) = length {
        builder.no_chunking(length);
    }
    builder.streaming(body)
}

/// The request as it goes to the box.
fn request_of(
    req: &HttpRequest,
    body: RequestBody,
    upgrade: Option<&str>,
    who: &Forwarding,
) -> Result<hyper::Request<RequestBody>, hyper::http::Error> {
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", actix_web::http::uri::PathAndQuery::as_str);
    let mut builder = hyper::Request::builder()
        .method(req.method().as_str())
        .uri(path);
    let named = connection_names_actix(req.headers());
    let mut has_host = false;
    let mut forwarded_for: Option<String> = None;
    let (mut proto, mut fwd_host) = (None, None);
    for (name, value) in req.headers() {
        let lower = name.as_str();
        if ends_here(lower, &named) {
            continue;
        }
        match lower {
            "x-forwarded-for" => {
                if who.peer_is_proxy {
                    let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    forwarded_for = Some(match forwarded_for {
                        Some(before) => format!("{before}, {v}"),
                        None => v,
                    });
                }
                continue;
            }
            "x-forwarded-proto" => {
                if who.peer_is_proxy {
                    proto = Some(value.as_bytes().to_vec());
                }
                continue;
            }
            "x-forwarded-host" => {
                if who.peer_is_proxy {
                    fwd_host = Some(value.as_bytes().to_vec());
                }
                continue;
            }
            "host" => has_host = true,
            _ => {}
        }
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    if !has_host {
        builder = builder.header("host", who.host.as_str());
    }
    // A peer without an address (another node, on this node's private
    // socket) added nothing to the list it forwarded: its entry is the
    // client's, and goes on as it came.
    let list = match (forwarded_for, who.peer) {
        (Some(before), Some(peer)) => Some(format!("{before}, {peer}")),
        (None, Some(peer)) => Some(peer.to_string()),
        (before, None) => before,
    };
    if let Some(list) = list {
        builder = builder.header("x-forwarded-for", list);
    }
    let scheme: &[u8] = if who.secure { b"https" } else { b"http" };
    builder = builder
        .header(
            "x-forwarded-proto",
            proto.unwrap_or_else(|| scheme.to_vec()),
        )
        .header(
            "x-forwarded-host",
            fwd_host.unwrap_or_else(|| who.host.as_bytes().to_vec()),
        );
    if let Some(protocol) = upgrade {
        builder = builder
            .header("connection", "upgrade")
            .header("upgrade", protocol);
    }
    builder.body(body)
}

/// Whether the request carries a body to forward: a length above zero, a
/// chunked body, or (over HTTP/2, where neither need be said) a method that
/// usually has one.
fn has_body(req: &HttpRequest) -> bool {
    let headers = req.headers();
    if let Some(length) = headers
        .get(actix_header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return length > 0;
    }
    if headers.contains_key(actix_header::TRANSFER_ENCODING) {
        return true;
    }
    req.version() == actix_web::http::Version::HTTP_2
        && !matches!(
            req.method().as_str(),
            "GET" | "HEAD" | "DELETE" | "OPTIONS" | "TRACE"
        )
}

/// The request's body as hyper reads it. The payload is not `Send`: the
/// stream is polled on this worker's thread only, where hyper's connection
/// task is spawned. Nothing for `idle`: the body ends in an error (hyper
/// drops the request) and `stalled` says why.
fn body_of(
    payload: web::Payload,
    idle: Duration,
    traffic: Option<Traffic>,
    stalled: Rc<Cell<bool>>,
) -> LocalBody {
    futures_util::stream::unfold(Some(payload), move |payload| {
        let (traffic, stalled) = (traffic.clone(), stalled.clone());
        async move {
            let mut payload = payload?;
            match tokio::time::timeout(idle, payload.next()).await {
                Ok(Some(Ok(chunk))) => {
                    if let Some(traffic) = &traffic {
                        traffic.saw();
                    }
                    Some((Ok(Frame::data(chunk)), Some(payload)))
                }
                Ok(Some(Err(e))) => Some((Err(std::io::Error::other(e.to_string())), None)),
                Ok(None) => None,
                Err(_) => {
                    stalled.set(true);
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the request's body sent nothing for too long",
                    );
                    Some((Err(e), None))
                }
            }
        }
    })
    .boxed_local()
}

/// A `Set-Cookie` value without its `Domain` attribute(s): the cookie stays
/// its host's. Everything else is kept as it was sent.
fn without_domain(value: &[u8]) -> Vec<u8> {
    let mut parts = value.split(|b| *b == b';');
    let mut out = parts.next().unwrap_or_default().to_vec();
    for attribute in parts {
        let name = attribute
            .split(|b| *b == b'=')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if name.eq_ignore_ascii_case(b"domain") {
            continue;
        }
        out.push(b';');
        out.extend_from_slice(attribute);
    }
    out
}

/// The protocol a request asks to switch to (`Connection: upgrade` and
/// `Upgrade: <protocol>`), as over HTTP/1.1.
fn upgrade_of(headers: &ActixHeaders) -> Option<String> {
    let asks = connection_names_actix(headers)
        .iter()
        .any(|n| n == "upgrade");
    let protocol = headers.get(actix_header::UPGRADE)?.to_str().ok()?;
    asks.then(|| protocol.to_owned())
}

fn upgrade_value(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get(hyper::header::UPGRADE)?
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Whether a header (its lower-case name) ends at this hop: a hop-by-hop
/// one, or one the `Connection` header names.
fn ends_here(name: &str, named: &[String]) -> bool {
    HOP_BY_HOP.contains(&name) || named.iter().any(|n| n == name)
}

/// The header names a `Connection` header lists, lower-cased.
fn connection_names(headers: &hyper::HeaderMap) -> Vec<String> {
    names_in(
        headers
            .get_all(hyper::header::CONNECTION)
            .iter()
            .map(hyper::header::HeaderValue::as_bytes),
    )
}

fn connection_names_actix(headers: &ActixHeaders) -> Vec<String> {
    names_in(
        headers
            .get_all(actix_header::CONNECTION)
            .map(actix_header::HeaderValue::as_bytes),
    )
}

fn names_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
    values
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// An upgraded connection: the client's bytes (the request payload, which
/// after an upgrade is the raw connection) go to the other end, its bytes
/// come back as the answer's body; a box stays awake while bytes flow.
/// With no byte either way for `idle`, both directions end.
fn pipe<H: Hop>(
    upgraded: TokioIo<hyper::upgrade::Upgraded>,
    mut payload: web::Payload,
    hop: H,
    idle: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + 'static {
    let (from_box, mut to_box) = tokio::io::split(upgraded);
    let last = Rc::new(Cell::new(Instant::now()));
    let traffic = hop.traffic();
    let seen = {
        let last = last.clone();
        move || {
            last.set(Instant::now());
            if let Some(traffic) = &traffic {
                traffic.saw();
            }
        }
    };
    let (to_box_seen, to_box_last) = (seen.clone(), last.clone());
    actix_web::rt::spawn(async move {
        loop {
            match tokio::time::timeout_at(to_box_last.get() + idle, payload.next()).await {
                Ok(Some(Ok(chunk))) => {
                    to_box_seen();
                    if to_box.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                Ok(_) => break,
                // Quiet this way; the other way may have had bytes meanwhile.
                Err(_) if to_box_last.get() + idle > Instant::now() => {}
                Err(_) => break,
            }
        }
        let _ = to_box.shutdown().await;
    });
    futures_util::stream::unfold(
        (from_box, hop, seen, last),
        move |(mut from_box, hop, seen, last)| async move {
            let mut buf = vec![0u8; UPGRADED_READ];
            loop {
                match tokio::time::timeout_at(last.get() + idle, from_box.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return None,
                    Ok(Ok(n)) => {
                        seen();
                        buf.truncate(n);
                        return Some((Ok(Bytes::from(buf)), (from_box, hop, seen, last)));
                    }
                    Err(_) if last.get() + idle > Instant::now() => {}
                    Err(_) => return None,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers `request_of` sends on for a request with `headers`.
    fn sent(headers: &[(&str, &str)], who: &Forwarding) -> hyper::HeaderMap {
        let mut req = actix_web::test::TestRequest::get().uri("/x");
        for header in headers {
            req = req.insert_header(*header);
        }
        request_of(
            &req.to_http_request(),
            Either::Left(Empty::new()),
            None,
            who,
        )
        .unwrap()
        .headers()
        .clone()
    }

    #[test]
    fn the_client_named_by_another_node_reaches_the_box() {
        // Forwarded by another node (its private socket has no address):
        // the entry it wrote goes on, and is the only one.
        let from_node = Forwarding {
            peer: None,
            peer_is_proxy: true,
            secure: false,
            host: "box-x.box.localhost".into(),
        };
        let headers = sent(&[("x-forwarded-for", "203.0.113.7")], &from_node);
        assert_eq!(headers["x-forwarded-for"], "203.0.113.7");
        assert_eq!(headers["x-forwarded-host"], "box-x.box.localhost");
        // A client that is no proxy: its claim is dropped, its address sent.
        let client = Forwarding {
            peer: Some("198.51.100.9".parse().unwrap()),
            peer_is_proxy: false,
            ..from_node
        };
        let headers = sent(&[("x-forwarded-for", "203.0.113.7")], &client);
        assert_eq!(headers["x-forwarded-for"], "198.51.100.9");
        // A trusted proxy: its list, then its own address.
        let proxy = Forwarding {
            peer_is_proxy: true,
            ..client
        };
        let headers = sent(&[("x-forwarded-for", "203.0.113.7")], &proxy);
        assert_eq!(headers["x-forwarded-for"], "203.0.113.7, 198.51.100.9");
        // No address and nothing forwarded (in-process): no header.
        let nobody = Forwarding {
            peer: None,
            peer_is_proxy: false,
            ..proxy
        };
        assert!(sent(&[], &nobody).get("x-forwarded-for").is_none());
    }

    #[test]
    fn set_cookie_loses_only_its_domain() {
        let cases: [(&[u8], &[u8]); 4] = [
            (b"a=b; Domain=box.example; Path=/", b"a=b; Path=/"),
            (b"c=d;domain=.box.example;Secure", b"c=d;Secure"),
            (
                b"e=f; DOMAIN = x; HttpOnly; Partitioned",
                b"e=f; HttpOnly; Partitioned",
            ),
            (b"g=h; Path=/domain=x", b"g=h; Path=/domain=x"),
        ];
        for (given, expected) in cases {
            assert_eq!(
                without_domain(given),
                expected,
                "{}",
                String::from_utf8_lossy(given)
            );
        }
    }
}

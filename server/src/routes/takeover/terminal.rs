//! `GET /takeover/{token}/ws`: the takeover page's WebSocket. The upgrade is
//! checked first (a plain GET spends nothing), then the link is spent and
//! the terminal opened (`?cols=&rows=` its first size): a used or expired
//! link is 410, an unknown one 404, before any upgrade.
//!
//! Then a local task bridges (actix-ws's stream is not `Send`): the
//! browser's text messages are JSON `{"type":"input","data":"..."}` and
//! `{"type":"resize","cols":N,"rows":N}`; the terminal's output goes to the
//! browser as binary messages. Each output message is sent (actix-ws's
//! queue holds at most 32) before more is read from the box, so a slow
//! browser slows the box's stream instead of growing this server's memory.
//! The shell ending closes the socket normally with a reason; the browser
//! closing hangs the terminal up. psbx closing it (no input for
//! `takeover.idle_timeout`, open `takeover.max_lifetime`, or the owner's
//! `DELETE /v1/boxes/{id}/terminals`: [`psbx_actors::boxes::terminals`])
//! hangs it up and closes the socket with a policy reason saying which.

use super::page_headers;
use crate::error::ApiError;
use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{CloseCode, CloseReason, Message};
use bytes::Bytes;
use futures_util::StreamExt;
use psbx_actors::boxes::terminals::Closed;
use psbx_actors::boxes::{Boxes, TakeoverError, Terminal};
use psbx_wire::boxd::PtyInput;
use serde::Deserialize;

/// The largest message taken from the browser.
const MAX_MESSAGE: usize = 64 * 1024;
/// The most read from the terminal per message to the browser.
const CHUNK: usize = 16 * 1024;
/// Sizes outside these are clamped.
const MAX_COLS: u16 = 500;
const MAX_ROWS: u16 = 200;

/// The terminal's first size, from the query string.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Size {
    cols: Option<u16>,
    rows: Option<u16>,
}

/// What the page sends.
#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum FromPage {
    Input { data: String },
    Resize { cols: u16, rows: u16 },
}

fn clamp(cols: u16, rows: u16) -> (u16, u16) {
    (cols.clamp(2, MAX_COLS), rows.clamp(1, MAX_ROWS))
}

/// `GET /takeover/{token}/ws`.
pub async fn terminal(
    req: HttpRequest,
    body: web::Payload,
    boxes: web::Data<Boxes>,
    token: web::Path<String>,
    size: web::Query<Size>,
) -> Result<HttpResponse, ApiError> {
    let (mut response, session, messages) = actix_ws::handle(&req, body).map_err(|e| {
        ApiError::bad_request(
            "not_websocket",
            format!("this is a WebSocket endpoint: {e}"),
        )
        .hint("open the takeover page itself (without /ws) in a browser")
    })?;
    let (cols, rows) = clamp(size.cols.unwrap_or(80), size.rows.unwrap_or(24));
    let limiter = super::lookup_allowed(&req)?;
    let terminal = match boxes.open_terminal(&token, cols, rows).await {
        Ok(terminal) => terminal,
        Err(e) => {
            if matches!(
                e,
                TakeoverError::Unknown | TakeoverError::Used | TakeoverError::Expired
            ) {
                super::lookup_failed(limiter);
            }
            return Err(e.into());
        }
    };
    tracing::info!(box_id = %terminal.box_id(), terminal = %terminal.id(), "takeover terminal opened");
    actix_web::rt::spawn(bridge(
        terminal,
        session,
        messages.max_frame_size(MAX_MESSAGE),
    ));
    let mut headers = HttpResponse::Ok();
    page_headers(&mut headers);
    for (name, value) in headers.finish().headers() {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    Ok(response)
}

/// Why the socket closes.
enum End {
    ShellEnded,
    BoxLost(String),
    PageLeft,
    BadMessage(String),
    ClosedByPsbx(Closed),
}

async fn bridge(
    mut terminal: Terminal,
    mut ws: actix_ws::Session,
    mut messages: actix_ws::MessageStream,
) {
    let mut buf = vec![0u8; CHUNK];
    let closing = terminal.closing();
    tokio::pin!(closing);
    let end = loop {
        tokio::select! {
            closed = &mut closing => break End::ClosedByPsbx(closed),
            message = messages.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    let input = match serde_json::from_str::<FromPage>(&text) {
                        Ok(FromPage::Input { data }) => PtyInput::Input(data.into_bytes()),
                        Ok(FromPage::Resize { cols, rows }) => {
                            let (cols, rows) = clamp(cols, rows);
                            PtyInput::Resize { cols, rows }
                        }
                        Err(e) => break End::BadMessage(format!("not a terminal message: {e}")),
                    };
                    if let Err(e) = terminal.send(&input).await {
                        break End::BoxLost(e.to_string());
                    }
                }
                Some(Ok(Message::Binary(bytes))) => {
                    if let Err(e) = terminal.send(&PtyInput::Input(bytes.to_vec())).await {
                        break End::BoxLost(e.to_string());
                    }
                }
                Some(Ok(Message::Ping(payload))) => {
                    if ws.pong(&payload).await.is_err() {
                        break End::PageLeft;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break End::PageLeft,
                Some(Ok(_)) => {}
            },
            read = terminal.read(&mut buf) => match read {
                Ok(0) => break End::ShellEnded,
                // Sent before reading more: the backpressure.
                Ok(n) => if ws.binary(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                    break End::PageLeft;
                },
                Err(e) => break End::BoxLost(e.to_string()),
            },
        }
    };
    let box_id = terminal.box_id().clone();
    let terminal_id = terminal.id().clone();
    let _ = terminal.hang_up().await;
    // No longer listed once the page learns it closed.
    drop(terminal);
    let reason = match end {
        End::ShellEnded => Some((CloseCode::Normal, "the shell ended".to_owned())),
        End::BoxLost(why) => {
            tracing::warn!(box_id = %box_id, error = %why, "takeover terminal lost its box");
            Some((
                CloseCode::Error,
                "connection lost: ask for a new takeover link".to_owned(),
            ))
        }
        End::BadMessage(why) => Some((CloseCode::Policy, why)),
        End::ClosedByPsbx(closed) => Some((
            CloseCode::Policy,
            format!("{closed}: ask for a new takeover link"),
        )),
        End::PageLeft => None,
    };
    tracing::info!(
        box_id = %box_id,
        terminal = %terminal_id,
        why = reason.as_ref().map(|(_, why)| why.as_str()).unwrap_or("the page left"),
        "takeover terminal closed"
    );
    if let Some((code, description)) = reason {
        let _ = ws
            .close(Some(CloseReason {
                code,
                description: Some(description),
            }))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_messages_parse() {
        assert_eq!(
            serde_json::from_str::<FromPage>(r#"{"type":"input","data":"é\u0003"}"#).unwrap(),
            FromPage::Input {
                data: "é\u{3}".into()
            }
        );
        assert_eq!(
            serde_json::from_str::<FromPage>(r#"{"type":"resize","cols":120,"rows":40}"#).unwrap(),
            FromPage::Resize {
                cols: 120,
                rows: 40
            }
        );
        assert!(serde_json::from_str::<FromPage>(r#"{"type":"exec"}"#).is_err());
        assert_eq!(clamp(0, 9999), (2, MAX_ROWS));
    }
}

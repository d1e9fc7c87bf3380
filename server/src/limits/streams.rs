//! At most [`PER_CONNECTION`] requests in flight on one connection
//! (review-2 L7). actix-http 3.20 builds its HTTP/2 server with no
//! `max_concurrent_streams` and offers no setting for it (`h2/mod.rs`), so
//! one TLS connection could carry any number of concurrent requests, each
//! holding a worker's attention, a database connection or a box stream.
//!
//! Each connection gets a counter when it opens ([`on_connect`], given to
//! `HttpServer::on_connect` by `psbx serve`); the outermost middleware
//! ([`cap`]) takes a place for each request and gives it back when the
//! response is over, its body included (a download, a WebSocket), and a
//! request past the cap is answered at once with 503 `too_many_streams` and
//! `Retry-After: 1`, before routing, authentication or any lookup. HTTP/1.1
//! carries one request at a time per connection and never reaches it. The
//! streams themselves are still opened by the h2 crate (its own limits on
//! resets and headers apply); what is bounded is the work they ask for.
//! Requests of in-process tests have no connection data and are not counted.

use crate::error::ApiError;
use actix_web::ResponseError;
use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use bytes::Bytes;
use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

/// Requests one connection may have in flight (nginx's default HTTP/2
/// stream limit).
pub const PER_CONNECTION: usize = 128;

/// The requests in flight on one connection.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

/// A place taken on a connection, given back when dropped.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InFlight {
    /// A place, unless `max` are taken.
    fn take(&self, max: usize) -> Option<Place> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(self.0.clone()))
    }
}

/// For `HttpServer::on_connect`: every connection gets its counter.
pub fn on_connect(_: &dyn Any, data: &mut Extensions) {
    data.insert(InFlight::default());
}

/// The middleware: a place per request on its connection, or 503.
pub async fn cap(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<Held<impl MessageBody>>>, actix_web::Error> {
    let counter = req.conn_data::<InFlight>().cloned();
    let place = match counter {
        Some(counter) => match counter.take(PER_CONNECTION) {
            Some(place) => Some(place),
            None => {
                let refused = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too_many_streams",
                    format!(
                        "this connection has {PER_CONNECTION} requests in flight, the most one connection may have"
                    ),
                )
                .hint("wait for some to finish, or open another connection; retry in a second");
                let mut response = refused.error_response();
                response.headers_mut().insert(
                    actix_web::http::header::RETRY_AFTER,
                    actix_web::http::header::HeaderValue::from_static("1"),
                );
                return Ok(req.into_response(response).map_into_right_body());
            }
        },
        None => None,
    };
    let response = next.call(req).await?;
    Ok(response
        .map_body(|_, body| Held {
            body,
            _place: place,
        })
        .map_into_left_body())
}

pin_project_lite::pin_project! {
    /// A response body that holds its request's place until it is over.
    pub struct Held<B> {
        #[pin]
        body: B,
        _place: Option<Place>,
    }
}

impl<B: MessageBody> MessageBody for Held<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        self.project().body.poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_given_back_when_dropped() {
        let flight = InFlight::default();
        let taken: Vec<Place> = (0..3).filter_map(|_| flight.take(3)).collect();
        assert_eq!(taken.len(), 3);
        assert!(flight.take(3).is_none());
        drop(taken);
        assert!(flight.take(3).is_some());
    }
}

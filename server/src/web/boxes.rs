//! The account's boxes in the app: the list on `/app` (state, goal, URLs,
//! and a **Shut down** button on every box that is not over), and `POST
//! /app/boxes/{id}/stop`, the same stop as `sandbox_stop` and `DELETE
//! /v1/boxes/{id}` ([`Boxes::stop`]): the box's disk is deleted with it.
//! Another account's box is the same 404 as none.

use super::layout::{self, PageError, escape};
use super::session::{self, CsrfForm, SessionError, Signed};
use crate::ids::IdPath;
use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use psbx_actors::boxes::{BoxReading, Boxes};
use psbx_actors::ids::BoxId;

/// How many boxes the list shows (newest first).
const LISTED: u32 = 50;

/// One box as a list item.
fn item(reading: &BoxReading, csrf: &str) -> String {
    let record = &reading.snapshot.record;
    let id = record.id.to_string();
    let title = record.name.as_deref().unwrap_or(&id);
    let goal = record
        .goal
        .as_deref()
        .map(|g| format!("<p class=\"goal\">{}</p>", layout::text(g)))
        .unwrap_or_default();
    let state = record.state;
    let mut urls = String::new();
    if let Some(found) = &reading.urls {
        let mut all = vec![found.url.clone()];
        all.extend(found.services.iter().flatten().cloned());
        all.dedup();
        urls.push_str("<ul class=\"urls\">");
        for url in all {
            urls.push_str(&format!(
                "<li><a href=\"{0}\" target=\"_blank\" rel=\"noopener noreferrer\">{0}</a></li>",
                escape(&url)
            ));
        }
        urls.push_str("</ul>");
    }
    let stop = if state.is_terminal() {
        String::new()
    } else {
        format!(
            "<form method=\"post\" action=\"/app/boxes/{id}/stop\" class=\"confirm\" \
             data-confirm=\"Shut down {name}? Its disk is deleted with it: push or copy out \
             anything you want to keep first.\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button type=\"submit\" class=\"danger\">Shut down</button></form>",
            id = escape(&id),
            name = escape(title),
            csrf = escape(csrf),
        )
    };
    format!(
        "<li class=\"box\" data-box=\"{id}\" data-state=\"{state}\"><div class=\"row\">\
         <h3>{title}</h3><span class=\"state state-{state}\">{state}</span></div>\
         <p class=\"muted\"><code>{id}</code> · started {started}</p>{goal}{urls}{stop}</li>",
        id = escape(&id),
        title = escape(title),
        started = layout::when(record.created_at),
    )
}

/// The boxes section of `/app`.
pub async fn section(boxes: &Boxes, who: &Signed) -> Result<String, PageError> {
    let (listed, _) = boxes.list(&who.account.id, None, LISTED).await?;
    let mut html = String::from("<section aria-labelledby=\"boxes\"><h2 id=\"boxes\">Boxes</h2>");
    if listed.is_empty() {
        html.push_str("<p class=\"muted\">No boxes yet: your AI starts one with <code>sandbox_start</code>.</p>");
    } else {
        html.push_str("<ul class=\"cards\">");
        for snapshot in &listed {
            html.push_str(&item(snapshot, &who.csrf));
        }
        html.push_str("</ul>");
    }
    html.push_str("</section>");
    Ok(html)
}

/// `POST /app/boxes/{id}/stop`: stops the box for good, then back to `/app`.
pub async fn stop(
    req: HttpRequest,
    who: Signed,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId, PageError>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, SessionError> {
    session::check_post(&req, form.csrf.as_deref())?;
    let stopped = boxes
        .stop(&who.account.id, &id)
        .await
        .map_err(PageError::from)?;
    tracing::info!(account = %who.account.id, box_id = %stopped.snapshot.record.id,
        "a box was shut down from the app");
    Ok(HttpResponse::SeeOther()
        .insert_header((LOCATION, "/app#boxes"))
        .finish())
}

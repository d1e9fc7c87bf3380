//! Reviews in the app: the boxes an agent handed to the person
//! (`sandbox_review`), through [`Reviews`] and [`Shots`].
//!
//! * On `/app` ([`section`]): "Ready for you" (waiting, newest first: title,
//!   box, when), then the answered and approved ones.
//! * `GET /app/reviews/{id}` ([`show`]): the title, the agent's summary
//!   (plain text, escaped, line breaks kept), its pages (box URLs in a
//!   sandboxed `<iframe>` and in a new tab), its screenshots (thumbnails to
//!   the full file), "Take a screenshot" of a page at a phone or desktop
//!   viewport, and the feedback form `app.js` drives (draw on a screenshot,
//!   write or dictate, several items, Send or Looks good). An answered or
//!   approved review shows what was sent instead.
//! * `POST /app/reviews/{id}/shots` ([`take_shot`]): [`Shots::take`] of one
//!   of the review's URLs by the box's Chromium, then back to the page.
//! * `POST /app/reviews/{id}/answer` ([`answer`]): JSON from `app.js`
//!   (`{approved, items: [{text, imagePng}]}`, the image base64 PNG, the
//!   token in `X-CSRF-Token`) to [`Reviews::answer`]; answers JSON.
//! * `GET /app/shots/{id}[?part=preview|poster]` ([`shot_file`]): a shot's
//!   file, `Cache-Control: private`.
//!
//! Another account's review or shot is the same 404 as none.

use super::layout::{self, PageError, escape};
use super::session::{self, SessionError, Signed};
use crate::error::ApiError;
use crate::ids::IdPath;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_actors::boxes::Boxes;
use psbx_actors::ids::{BoxId, ReviewId, ShotId};
use psbx_actors::reviews::{Answerer, NewItem, Review, ReviewState, Reviews};
use psbx_actors::shots::{Part, Shot, Shots, StoredKind};
use psbx_wire::boxd::ShotRequest;
use serde::{Deserialize, Serialize};

/// The largest answer body: every item's image, base64 (the actor takes at
/// most [`psbx_actors::reviews::ITEMS_MAX`] items).
const ANSWER_LIMIT: usize = 48 << 20;
/// The viewports a person picks for a screenshot: phone and desktop.
const PHONE: (u32, u32) = (390, 844);
const DESKTOP: (u32, u32) = (1280, 800);
/// The iframe's sandbox: the page's scripts and forms work (it is another
/// origin, a box URL, so `allow-same-origin` gives it only its own).
const FRAME_SANDBOX: &str = "allow-scripts allow-forms allow-same-origin allow-popups \
                             allow-popups-to-escape-sandbox allow-modals allow-downloads";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// The answer route's body limit (the app's default JSON limit is 1 MiB).
pub fn answer_json_config() -> web::JsonConfig {
    crate::limits::body::json_config().limit(ANSWER_LIMIT)
}

fn state_label(state: ReviewState) -> &'static str {
    match state {
        ReviewState::Waiting => "Waiting for you",
        ReviewState::Answered => "Answered: your feedback went to the agent",
        ReviewState::Approved => "Approved: looks good",
    }
}

fn card(review: &Review) -> String {
    let state = review.state.as_str();
    format!(
        "<li class=\"review-card\" data-review=\"{id}\" data-state=\"{state}\">\
         <a class=\"card\" href=\"/app/reviews/{id}\"><div class=\"row\"><h3>{title}</h3>\
         <span class=\"state state-{state}\">{state}</span></div>\
         <p class=\"muted\">box <code>{box_id}</code> · {when}</p></a></li>",
        id = escape(review.id.as_str()),
        title = escape(&review.title),
        box_id = escape(review.box_id.as_str()),
        when = layout::when(review.created_at),
    )
}

/// The reviews part of `/app`.
pub async fn section(req: &HttpRequest, who: &Signed) -> Result<String, PageError> {
    let reviews = data::<Reviews>(req)?;
    let all = reviews
        .list(&who.account.id, None)
        .await
        .map_err(ApiError::from)?;
    let (waiting, done): (Vec<&Review>, Vec<&Review>) =
        all.iter().partition(|r| r.state == ReviewState::Waiting);
    let mut html =
        String::from("<section aria-labelledby=\"ready\"><h1 id=\"ready\">Ready for you</h1>");
    if waiting.is_empty() {
        html.push_str(
            "<p class=\"muted\">Nothing is waiting for you. When your AI hands a box over \
             (<code>sandbox_review</code>), it shows up here.</p>",
        );
    } else {
        html.push_str("<ul class=\"cards\" id=\"waiting\">");
        for review in waiting {
            html.push_str(&card(review));
        }
        html.push_str("</ul>");
    }
    html.push_str("</section>");
    if !done.is_empty() {
        html.push_str(
            "<section aria-labelledby=\"answered\"><h2 id=\"answered\">Answered and approved</h2>\
             <ul class=\"cards\" id=\"done\">",
        );
        for review in done {
            html.push_str(&card(review));
        }
        html.push_str("</ul></section>");
    }
    Ok(html)
}

fn data<T: 'static>(req: &HttpRequest) -> Result<web::Data<T>, PageError> {
    req.app_data::<web::Data<T>>()
        .cloned()
        .ok_or_else(|| PageError::Internal("the app's state is incomplete".into()))
}

/// Whether the frame can show `url`: a box URL (the CSP lets no other in).
fn framable(boxes: &Boxes, url: &str) -> bool {
    let Some(urls) = boxes.urls() else {
        return false;
    };
    url::Url::parse(url).is_ok_and(|u| {
        let host = match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => return false,
        };
        urls.is_box_host(&host)
    })
}

fn shot_figure(shot: &Shot, n: usize, can_draw: bool) -> String {
    let id = escape(shot.id.as_str());
    let what = match &shot.source {
        Some(url) => format!("{} at {}×{}", url, shot.width, shot.height),
        None => format!("the box's display, {}×{}", shot.width, shot.height),
    };
    let recording = shot.kind == StoredKind::Recording;
    let label = if recording {
        format!("Recording {n}: {what}")
    } else {
        format!("Screenshot {n}: {what}")
    };
    let draw = if can_draw && !recording {
        format!(
            "<button type=\"button\" class=\"annotate\" data-shot=\"{id}\" \
             data-src=\"/app/shots/{id}\" data-label=\"{}\">Draw on it</button>",
            escape(&label)
        )
    } else {
        String::new()
    };
    format!(
        "<li><figure><a href=\"/app/shots/{id}\" target=\"_blank\" rel=\"noopener\">\
         <img src=\"/app/shots/{id}?part=preview\" alt=\"{label}\" loading=\"lazy\" \
         width=\"{w}\" height=\"{h}\"></a><figcaption>{label} · {when}</figcaption>{draw}\
         </figure></li>",
        label = escape(&label),
        w = shot.width,
        h = shot.height,
        when = layout::when(shot.created_at),
    )
}

/// What the page shows of the box: its state as stored (reading a page
/// neither asks boxd nor counts as the box's activity).
async fn box_state(boxes: &Boxes, who: &Signed, box_id: &BoxId) -> Option<String> {
    boxes
        .record(&who.account.id, box_id)
        .await
        .ok()
        .map(|r| r.state.to_string())
}

/// `GET /app/reviews/{id}`.
pub async fn show(
    who: Signed,
    reviews: web::Data<Reviews>,
    boxes: web::Data<Boxes>,
    id: IdPath<ReviewId, PageError>,
) -> Result<HttpResponse, PageError> {
    let review = reviews
        .get(&who.account.id, &id)
        .await
        .map_err(ApiError::from)?;
    let waiting = review.state == ReviewState::Waiting;
    let box_state = box_state(&boxes, &who, &review.box_id).await;
    let box_live = box_state
        .as_deref()
        .is_some_and(|s| !matches!(s, "stopped" | "failed"));
    let rid = escape(review.id.as_str());
    let csrf = escape(&who.csrf);
    let state = review.state.as_str();
    let mut body = format!(
        "<article id=\"review\" data-review=\"{rid}\" data-box=\"{box_id}\" data-state=\"{state}\">\
         <p class=\"crumbs\"><a href=\"/app\">Ready for you</a> › review</p>\
         <h1>{title}</h1><p><span class=\"state state-{state}\" id=\"review-state\">{label}</span></p>\
         <p class=\"muted\">box <code>{box_id}</code>{box_state} · handed over {when}{answered}</p>\
         <section aria-labelledby=\"summary-h\"><h2 id=\"summary-h\">What the agent says</h2>\
         <div class=\"summary\">{summary}</div></section>",
        title = escape(&review.title),
        label = state_label(review.state),
        box_id = escape(review.box_id.as_str()),
        box_state = box_state
            .as_deref()
            .map(|s| format!(
                " <span class=\"state state-{0}\" id=\"box-state\">{0}</span>",
                escape(s)
            ))
            .unwrap_or_default(),
        when = layout::when(review.created_at),
        answered = review
            .answered_at
            .map(|at| {
                let by = match &review.answered_by {
                    Some(by) if !by.is_person() => format!(
                        " <strong class=\"answered-by\" id=\"answered-by\">through {}</strong>",
                        escape(&by.to_string())
                    ),
                    _ => String::new(),
                };
                format!(" · answered {}{by}", layout::when(at))
            })
            .unwrap_or_default(),
        summary = if review.summary.is_empty() {
            "<span class=\"muted\">(no summary)</span>".to_owned()
        } else {
            layout::text(&review.summary)
        },
    );

    // The pages.
    if !review.urls.is_empty() {
        body.push_str(
            "<section aria-labelledby=\"pages-h\"><h2 id=\"pages-h\">Pages</h2><ul class=\"urls\">",
        );
        let first_framable = review.urls.iter().find(|u| framable(&boxes, u));
        for url in &review.urls {
            let u = escape(url);
            let show_here = if box_live && framable(&boxes, url) {
                format!(
                    " <button type=\"button\" class=\"show-url link\" data-url=\"{u}\" \
                     aria-pressed=\"{}\">show here</button>",
                    Some(url) == first_framable
                )
            } else {
                String::new()
            };
            body.push_str(&format!(
                "<li><a href=\"{u}\" target=\"_blank\" rel=\"noopener noreferrer\">{u}</a> \
                 <span class=\"muted\">(opens in a new tab)</span>{show_here}</li>"
            ));
        }
        body.push_str("</ul>");
        if box_live {
            if let Some(url) = first_framable {
                body.push_str(&format!(
                    "<div class=\"frame-wrap\"><iframe id=\"frame\" src=\"{}\" sandbox=\"{FRAME_SANDBOX}\" \
                     title=\"The box's page\" referrerpolicy=\"no-referrer\"></iframe></div>",
                    escape(url)
                ));
            }
            body.push_str(&format!(
                "<form method=\"post\" action=\"/app/reviews/{rid}/shots\" id=\"shoot\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <label for=\"shot-url\">Take a screenshot of</label>\
                 <select id=\"shot-url\" name=\"url\">"
            ));
            for url in &review.urls {
                body.push_str(&format!("<option>{}</option>", escape(url)));
            }
            body.push_str(&format!(
                "</select><fieldset><legend>Screen size</legend>\
                 <label><input type=\"radio\" name=\"viewport\" value=\"phone\"> Phone ({}×{})</label>\
                 <label><input type=\"radio\" name=\"viewport\" value=\"desktop\" checked> Desktop ({}×{})</label>\
                 </fieldset><button type=\"submit\">Take a screenshot</button>\
                 <p class=\"muted\">The box's browser takes it; it appears under Screenshots.</p></form>",
                PHONE.0, PHONE.1, DESKTOP.0, DESKTOP.1
            ));
        } else {
            body.push_str("<p class=\"muted\">The box is not running: its pages cannot be opened any more.</p>");
        }
        body.push_str("</section>");
    }

    // The screenshots.
    body.push_str(
        "<section aria-labelledby=\"shots-h\" id=\"shots\"><h2 id=\"shots-h\">Screenshots</h2>",
    );
    let shots: Vec<&Shot> = review
        .shots
        .iter()
        .filter(|s| s.kind != StoredKind::Annotation)
        .collect();
    if shots.is_empty() {
        body.push_str("<p class=\"muted\">No screenshots yet.</p>");
    } else {
        body.push_str("<ul class=\"shots\">");
        for (n, shot) in shots.iter().enumerate() {
            body.push_str(&shot_figure(shot, n + 1, waiting));
        }
        body.push_str("</ul>");
    }
    body.push_str("</section>");

    if waiting {
        body.push_str(&format!(
            "<section aria-labelledby=\"feedback-h\" id=\"feedback\"><h2 id=\"feedback-h\">Your feedback</h2>\
             <div id=\"editor\" class=\"editor\" hidden data-ready=\"false\">\
             <p id=\"editor-label\" class=\"muted\"></p>\
             <div class=\"editor-stage\"><img id=\"editor-image\" alt=\"The screenshot you are drawing on\">\
             <canvas id=\"editor-canvas\" aria-label=\"Drawing area: circle the problem on the screenshot\"></canvas></div>\
             <div class=\"buttons\"><button type=\"button\" id=\"undo\">Undo</button>\
             <button type=\"button\" id=\"clear\">Clear</button>\
             <button type=\"button\" id=\"close-editor\">Close without adding</button></div></div>\
             <label for=\"item-text\">What is wrong</label>\
             <textarea id=\"item-text\" name=\"text\" maxlength=\"{max}\" \
             placeholder=\"Pick a screenshot, circle what is wrong, and say what you see\"></textarea>\
             <div class=\"buttons\"><button type=\"button\" id=\"dictate\" hidden aria-pressed=\"false\">Dictate</button>\
             <button type=\"button\" id=\"add-item\">Add</button></div>\
             <h3 id=\"items-heading\" hidden>To send</h3><ol id=\"items\" class=\"items\"></ol>\
             <div class=\"buttons\"><button type=\"button\" id=\"send\" class=\"primary\">Send</button>\
             <button type=\"button\" id=\"approve\">Looks good</button></div>\
             <p id=\"send-status\" role=\"status\" aria-live=\"polite\"></p></section>",
            max = psbx_actors::reviews::TEXT_MAX,
        ));
    } else {
        body.push_str("<section aria-labelledby=\"sent-h\"><h2 id=\"sent-h\">What you sent</h2>");
        if review.items.is_empty() {
            body.push_str("<p>Looks good: no items.</p>");
        } else {
            body.push_str("<ol class=\"items\" id=\"sent-items\">");
            for (n, item) in review.items.iter().enumerate() {
                let image = item
                    .image
                    .as_ref()
                    .map(|shot| {
                        format!(
                            "<a href=\"/app/shots/{0}\" target=\"_blank\" rel=\"noopener\">\
                             <img src=\"/app/shots/{0}?part=preview\" alt=\"Your drawing for item {1}\"></a>",
                            escape(shot.id.as_str()),
                            n + 1
                        )
                    })
                    .unwrap_or_default();
                body.push_str(&format!(
                    "<li><p>{}</p>{image}</li>",
                    layout::text(&item.text)
                ));
            }
            body.push_str("</ol>");
        }
        body.push_str("</section>");
    }
    body.push_str("</article>");
    Ok(layout::html(
        StatusCode::OK,
        layout::page(&review.title, Some(&who), &body),
    ))
}

/// The screenshot form.
#[derive(Debug, Deserialize)]
pub struct ShotForm {
    csrf: Option<String>,
    url: String,
    viewport: Option<String>,
}

/// `POST /app/reviews/{id}/shots`: a screenshot of one of the review's
/// pages, taken by the box's Chromium at the viewport picked.
pub async fn take_shot(
    req: HttpRequest,
    who: Signed,
    reviews: web::Data<Reviews>,
    shots: web::Data<Shots>,
    id: IdPath<ReviewId, PageError>,
    form: web::Form<ShotForm>,
) -> Result<HttpResponse, SessionError> {
    let form = form.into_inner();
    session::check_post(&req, form.csrf.as_deref())?;
    let review = reviews
        .get(&who.account.id, &id)
        .await
        .map_err(|e| PageError::Api(e.into()))?;
    if !review.urls.contains(&form.url) {
        return Err(PageError::Invalid(
            "that page is not one of this review's: pick one from the list".into(),
        )
        .into());
    }
    let (width, height) = match form.viewport.as_deref() {
        Some("phone") => PHONE,
        _ => DESKTOP,
    };
    let request = ShotRequest {
        url: Some(form.url),
        width,
        height,
        ..ShotRequest::default()
    };
    let shot = shots
        .take(&who.account.id, &review.box_id, request)
        .await
        .map_err(|e| PageError::Api(e.into()))?;
    tracing::info!(account = %who.account.id, review = %review.id, shot = %shot.id,
        "a screenshot was taken from the app");
    Ok(HttpResponse::SeeOther()
        .insert_header((LOCATION, format!("/app/reviews/{}#shots", review.id)))
        .finish())
}

/// One item of an answer, as `app.js` sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerItem {
    #[serde(default)]
    text: String,
    /// The annotated screenshot, PNG, base64.
    #[serde(default)]
    image_png: Option<String>,
}

/// The answer `app.js` sends.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerBody {
    approved: bool,
    #[serde(default)]
    items: Vec<AnswerItem>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Answered {
    id: String,
    state: &'static str,
    items: usize,
}

/// `POST /app/reviews/{id}/answer` (JSON): the person's feedback, or "looks good".
pub async fn answer(
    req: HttpRequest,
    who: Signed,
    reviews: web::Data<Reviews>,
    id: IdPath<ReviewId>,
    body: web::Json<AnswerBody>,
) -> Result<HttpResponse, actix_web::Error> {
    session::check_post(&req, None)?;
    let body = body.into_inner();
    let mut items = Vec::with_capacity(body.items.len());
    for (n, item) in body.items.into_iter().enumerate() {
        let image_png = match item.image_png.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(encoded) => {
                let png = STANDARD.decode(encoded).map_err(|_| {
                    ApiError::bad_request(
                        "invalid_image",
                        format!("item {}'s image is not base64", n + 1),
                    )
                })?;
                if !png.starts_with(PNG_MAGIC) {
                    return Err(ApiError::bad_request(
                        "invalid_image",
                        format!("item {}'s image is not a PNG", n + 1),
                    )
                    .into());
                }
                Some(png)
            }
        };
        items.push(NewItem {
            text: item.text,
            image_png,
        });
    }
    let review = reviews
        .answer(&who.account.id, &id, &Answerer::App, body.approved, items)
        .await
        .map_err(ApiError::from)?;
    tracing::info!(account = %who.account.id, review = %review.id, state = review.state.as_str(),
        items = review.items.len(), "a review was answered in the app");
    Ok(HttpResponse::Ok().json(Answered {
        state: review.state.as_str(),
        items: review.items.len(),
        id: review.id.to_string(),
    }))
}

/// Which file of a shot.
#[derive(Debug, Deserialize)]
pub struct PartQuery {
    part: Option<String>,
}

/// The media types a shot file is served as; anything else is a download.
fn served_as(mime: &str) -> Option<&'static str> {
    Some(match mime {
        "image/png" => "image/png",
        "image/jpeg" => "image/jpeg",
        "video/webm" => "video/webm",
        "video/mp4" => "video/mp4",
        _ => return None,
    })
}

/// `GET /app/shots/{id}[?part=preview|poster]`.
pub async fn shot_file(
    who: Signed,
    shots: web::Data<Shots>,
    id: IdPath<ShotId, PageError>,
    query: web::Query<PartQuery>,
) -> Result<HttpResponse, PageError> {
    let part = match query.part.as_deref() {
        None | Some("full") => Part::Full,
        Some("preview") => Part::Preview,
        Some("poster") => Part::Poster,
        Some(other) => {
            return Err(PageError::Invalid(format!(
                "part {other:?} is not a part of a shot: give preview, poster or nothing"
            )));
        }
    };
    let (shot, mime, len, reader) = shots
        .open(&who.account.id, &id, part)
        .await
        .map_err(ApiError::from)?;
    let mut answer = HttpResponse::Ok();
    answer.insert_header((header::CACHE_CONTROL, "private, max-age=3600"));
    match served_as(&mime) {
        Some(kind) => answer.content_type(kind),
        None => answer
            .content_type("application/octet-stream")
            .insert_header((
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", shot.id),
            )),
    };
    Ok(answer
        .no_chunking(len)
        .streaming(crate::routes::shots::pieces(reader)))
}

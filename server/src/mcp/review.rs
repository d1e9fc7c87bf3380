//! `sandbox_shot` and `sandbox_review`: screenshots and recordings come back
//! as a link to the stored file plus its preview as image content (at most
//! 1280 px on the long side: never a multi-megabyte inline blob); a review's
//! feedback comes back as text plus the images the person drew on, also as
//! image content. `sandbox_review` with `wait_s` waits for the person's
//! answer with a progress notification every few seconds; an answer given
//! after the wait ran out is kept, and the next call (or `sandbox_status`)
//! returns it.

use super::reply::{account, box_failed, failed, structured, unauthenticated};
use super::tools::PsbxMcp;
use crate::ids::RequestId;
use crate::views::reviews::{MAX_WAIT_S, ReviewView};
use crate::views::shots::{ShotView, TakeShot};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_actors::ids::{AccountId, BoxId};
use psbx_actors::reviews::{NewReview, Review, ReviewError, ReviewState};
use psbx_actors::shots::{Part, Shot, ShotError, StoredKind};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use std::time::Duration;

/// How often a waiting `sandbox_review` reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ShotArgs {
    /// The box id, box_...
    pub id: String,
    #[serde(flatten)]
    pub shot: TakeShot,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReviewArgs {
    /// The box id, box_...
    pub id: String,
    /// What the person should look at, in a few words. Given: hands the box
    /// over (or updates the review still waiting); left out: reads the box's
    /// latest review.
    pub title: Option<String>,
    /// What was done and how to try it (plain text).
    pub summary: Option<String>,
    /// The pages to open (box URLs); default: the box's URL.
    pub urls: Option<Vec<String>>,
    /// Wait this many seconds at most for the person's answer (default 0, at
    /// most 3600; keep it under 240 for clients that give up after five
    /// minutes, and call again to wait more: nothing the person sends is lost).
    pub wait_s: Option<u64>,
}

fn shot_failed(e: ShotError) -> CallToolResult {
    match e {
        ShotError::Box(inner) => box_failed(inner),
        ShotError::NotFound(_) => failed(format!("{e}.")),
        e => failed(format!("{e}.")),
    }
}

pub(super) fn review_failed(e: ReviewError) -> CallToolResult {
    match e {
        ReviewError::Box(inner) => box_failed(inner),
        ReviewError::Shot(inner) => shot_failed(inner),
        ReviewError::NotFound(_) => failed(format!(
            "{e}. sandbox_review with a title hands a box over."
        )),
        e => failed(format!("{e}.")),
    }
}

impl PsbxMcp {
    /// The preview of a shot as image content, if it can be read.
    async fn preview(&self, account: &AccountId, shot: &Shot) -> Option<ContentBlock> {
        match self.shots.file(account, &shot.id, Part::Preview).await {
            Ok((_, mime, bytes)) => Some(ContentBlock::image(STANDARD.encode(bytes), mime)),
            Err(e) => {
                tracing::warn!(shot = %shot.id, error = %e, "could not read a shot's preview");
                None
            }
        }
    }

    /// What a review says, for the agent: a summary line, each feedback
    /// item's text and the image drawn on.
    pub(super) async fn review_content(
        &self,
        account: &AccountId,
        review: &Review,
        view: &ReviewView,
    ) -> Vec<ContentBlock> {
        let mut content = vec![ContentBlock::text(match review.state {
            ReviewState::Waiting => format!(
                "review {} ({:?}) is waiting for the person: they open it at {}",
                review.id, review.title, view.app_url
            ),
            ReviewState::Approved => format!(
                "review {} ({:?}) was approved{}: it looks good ({} comments)",
                review.id,
                review.title,
                by(review),
                review.items.len()
            ),
            ReviewState::Answered => format!(
                "review {} ({:?}) was answered{}: {} feedback items follow",
                review.id,
                review.title,
                by(review),
                review.items.len()
            ),
        })];
        for (n, item) in review.items.iter().enumerate() {
            let what = if item.image.is_some() {
                " (with the screenshot they drew on, next)"
            } else {
                ""
            };
            content.push(ContentBlock::text(format!(
                "feedback {}{what}: {}",
                n + 1,
                item.text
            )));
            if let Some(image) = &item.image
                && let Some(block) = self.preview(account, image).await
            {
                content.push(block);
            }
        }
        content
    }
}

#[tool_router(router = review_router, vis = "pub(super)")]
impl PsbxMcp {
    #[tool(
        description = "Take a screenshot or a recording in a box. With url (as the box reaches it, e.g. \
                       http://localhost:3000/, or the box's own URL): Chromium in the box opens the page at \
                       width x height (default 1280x800; fullPage: the whole page); without url: the box's \
                       virtual display (DISPLAY=:99, 1920x1080). kind \"recording\" records seconds (default 5, \
                       at most 60) as webm (or format \"mp4\"). Returns the image (at most 1280 px on its long \
                       side; a recording's first frame) and a link to the full file, stored by psbx until the \
                       box stops (kept longer when a review has it)."
    )]
    pub(super) async fn sandbox_shot(
        &self,
        Parameters(a): Parameters<ShotArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        // A malformed id fails as an unknown box does (`crate::ids`).
        let id = match BoxId::read(&a.id) {
            Ok(id) => id,
            Err(e) => return Ok(box_failed(e)),
        };
        let shot = match self
            .shots
            .take(&who.account_id, &id, a.shot.request())
            .await
        {
            Ok(shot) => shot,
            Err(e) => return Ok(shot_failed(e)),
        };
        let view = ShotView::new(&shot, &self.info);
        let of = shot.source.as_deref().unwrap_or("the virtual display");
        let what = match (shot.kind, shot.duration_ms) {
            (StoredKind::Recording, Some(ms)) => {
                format!("recording of {of}, {:.1} s", ms as f64 / 1000.0)
            }
            (StoredKind::Recording, None) => format!("recording of {of}"),
            _ => format!("screenshot of {of}"),
        };
        let mut result = structured(
            format!(
                "{} {what}: {}x{} {}, {} bytes; the full file is {} (the image below is its preview)",
                shot.id, shot.width, shot.height, shot.mime, shot.bytes, view.url
            ),
            &view,
        );
        if let Some(block) = self.preview(&who.account_id, &shot).await {
            result.content.push(block);
        }
        Ok(result)
    }

    #[tool(
        description = "Hand a box to a person for review: it shows under \"Ready for you\" in psbx's app, \
                       where they open its pages, draw on screenshots and write (or dictate) what is wrong. \
                       Give title, summary and urls (default: the box's URL) to hand over; call again without \
                       them to read the answer. wait_s waits for the answer (progress every 5 s). The result \
                       has state (waiting, answered, approved) and each feedback item's text with the image \
                       the person drew on; sandbox_status also returns it."
    )]
    pub(super) async fn sandbox_review(
        &self,
        Parameters(a): Parameters<ReviewArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(who) = account(&ctx) else {
            return Ok(unauthenticated());
        };
        let wait = a.wait_s.unwrap_or(0);
        if wait > MAX_WAIT_S {
            return Ok(failed(format!(
                "wait_s must be at most {MAX_WAIT_S} seconds; call again to wait longer"
            )));
        }
        // A malformed id fails as an unknown box does (`crate::ids`).
        let id = match BoxId::read(&a.id) {
            Ok(id) => id,
            Err(e) => return Ok(box_failed(e)),
        };
        let review = match a.title {
            Some(title) => {
                let new = NewReview {
                    title,
                    summary: a.summary.unwrap_or_default(),
                    urls: a.urls.unwrap_or_default(),
                };
                self.reviews.hand_over(&who.account_id, &id, new).await
            }
            None => match self.reviews.latest(&who.account_id, &id).await {
                Ok(Some(review)) => Ok(review),
                Ok(None) => {
                    return Ok(failed(format!(
                        "box {} was never handed over: call sandbox_review with a title and summary",
                        a.id
                    )));
                }
                Err(e) => Err(e),
            },
        };
        let mut review = match review {
            Ok(review) => review,
            Err(e) => return Ok(review_failed(e)),
        };
        let progress = ctx.meta.get_progress_token();
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_secs(wait);
        while review.state == ReviewState::Waiting && tokio::time::Instant::now() < deadline {
            let step = PROGRESS_EVERY.min(deadline - tokio::time::Instant::now());
            review = match self.reviews.wait(&who.account_id, &review.id, step).await {
                Ok(review) => review,
                Err(e) => return Ok(review_failed(e)),
            };
            if review.state == ReviewState::Waiting
                && let Some(token) = &progress
            {
                let secs = started.elapsed().as_secs();
                let note = ProgressNotificationParam::new(token.clone(), secs as f64)
                    .with_total(wait as f64)
                    .with_message(format!(
                        "waiting {secs}s of {wait}s for the person to answer review {}",
                        review.id
                    ));
                let _ = ctx.peer.notify_progress(note).await;
            }
        }
        let view = ReviewView::new(&review, &self.info);
        let content = self.review_content(&who.account_id, &review, &view).await;
        let mut result = structured(String::new(), &view);
        result.content = content;
        Ok(result)
    }
}

/// Who answered, for the agent: a person in the app, or the API (which no
/// person in the app saw), so an answer an agent gave itself is not read as
/// the person's.
fn by(review: &Review) -> String {
    match &review.answered_by {
        Some(by) if by.is_person() => " by the person in psbx's app".to_owned(),
        Some(by) => format!(" through {by} (no person in the app answered)"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_schemas_are_flat_with_every_field() {
        for (schema, fields) in [
            (
                schemars::schema_for!(ShotArgs),
                &[
                    "id", "url", "kind", "seconds", "width", "height", "fullPage", "format",
                ][..],
            ),
            (
                schemars::schema_for!(ReviewArgs),
                &["id", "title", "summary", "urls", "wait_s"][..],
            ),
        ] {
            let object = serde_json::to_value(&schema).unwrap();
            let flat = super::super::schema::flatten(object.as_object().unwrap());
            let text = serde_json::Value::Object(flat.clone()).to_string();
            for banned in [
                "$ref",
                "anyOf",
                "oneOf",
                "allOf",
                "\"null\"",
                "\"format\":\"",
                "$schema",
            ] {
                assert!(!text.contains(banned), "{banned} in {text}");
            }
            for field in fields {
                assert!(
                    flat["properties"].get(*field).is_some(),
                    "no {field} in {text}"
                );
            }
            assert_eq!(flat["required"], serde_json::json!(["id"]), "{text}");
        }
    }
}

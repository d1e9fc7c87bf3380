//! The shapes of shots on the API: what taking one asks for
//! ([`TakeShot`], read into boxd's `ShotRequest`), what a stored shot
//! reads as ([`ShotView`], with the URLs of its files), and which file of
//! it a query names ([`part`]). `routes::shots` and MCP's `sandbox_shot`
//! answer the same views; a review's views carry them too.

use crate::error::ApiError;
use crate::server_info::ServerInfo;
use chrono::{DateTime, Utc};
use psbx_actors::shots::{Part, Shot};
use psbx_wire::boxd::{ShotKind, ShotRequest, VideoFormat};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TakeShot {
    /// The page, as the box reaches it (`http://localhost:3000/`) or the box's
    /// own URL; none: the box's virtual display (1920x1080).
    #[schema(max_length = 8192)]
    pub url: Option<String>,
    /// `screenshot` (default) or `recording`.
    #[schema(value_type = Option<String>)]
    #[schemars(with = "Option<String>")]
    pub kind: Option<ShotKind>,
    /// A recording's length in seconds (1 to 60, default 5; checked for screenshots too).
    #[schema(minimum = 1, maximum = 60)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub seconds: Option<u32>,
    /// The page's viewport in CSS pixels (320 to 3840, default 1280).
    #[schema(minimum = 320, maximum = 3840)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub width: Option<u32>,
    /// (240 to 2160, default 800).
    #[schema(minimum = 240, maximum = 2160)]
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub height: Option<u32>,
    /// The whole page, not only the viewport (screenshots of a page; cut at 16384 px).
    pub full_page: Option<bool>,
    /// A recording's format: `webm` (default) or `mp4`.
    #[schema(value_type = Option<String>)]
    #[schemars(with = "Option<String>")]
    pub format: Option<VideoFormat>,
}

impl TakeShot {
    /// The request boxd gets, defaults filled in.
    pub fn request(self) -> ShotRequest {
        let defaults = ShotRequest::default();
        ShotRequest {
            kind: self.kind.unwrap_or(defaults.kind),
            url: self.url,
            width: self.width.unwrap_or(defaults.width),
            height: self.height.unwrap_or(defaults.height),
            full_page: self.full_page.unwrap_or(false),
            seconds: self.seconds.unwrap_or(defaults.seconds),
            format: self.format.unwrap_or(defaults.format),
        }
    }
}

/// A stored screenshot, recording, or image a reviewer drew on.
#[derive(Debug, Clone, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShotView {
    /// `shot_...`
    pub id: String,
    pub box_id: String,
    /// `screenshot`, `recording` or `annotation`.
    pub kind: String,
    /// `image/png`, `video/webm` or `video/mp4`.
    pub mime: String,
    pub width: u32,
    pub height: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The file's size in bytes.
    pub bytes: u64,
    /// What psbx stores for it (file, preview, poster), counted for metering.
    pub stored_bytes: u64,
    /// The whole file (needs the same credential as the API).
    pub url: String,
    /// A PNG at most 1280 px on its long side (a recording's poster frame).
    pub preview_url: String,
    /// A recording's first frame (PNG).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poster_url: Option<String>,
    /// The page it shows, as asked for; none for the virtual display.
    pub source: Option<String>,
    /// The review that keeps it after its box stops.
    pub review_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl ShotView {
    pub fn new(shot: &Shot, info: &ServerInfo) -> Self {
        let whole = format!(
            "{}/v1/boxes/{}/shots/{}/file",
            info.public_url, shot.box_id, shot.id
        );
        Self {
            id: shot.id.to_string(),
            box_id: shot.box_id.to_string(),
            kind: shot.kind.as_str().to_owned(),
            mime: shot.mime.clone(),
            width: shot.width,
            height: shot.height,
            duration_ms: shot.duration_ms,
            bytes: shot.bytes,
            stored_bytes: shot.stored_bytes,
            preview_url: format!("{whole}?part=preview"),
            poster_url: shot.has_poster.then(|| format!("{whole}?part=poster")),
            url: whole,
            source: shot.source.clone(),
            review_id: shot.review_id.as_ref().map(ToString::to_string),
            created_at: shot.created_at,
        }
    }
}

/// A box's shots.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShotList {
    pub shots: Vec<ShotView>,
    /// What this box's shots take, in bytes.
    pub stored_bytes: u64,
    /// What all of the account's stored shots take (reviews' included).
    pub account_stored_bytes: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    /// How many shots were deleted.
    pub deleted: usize,
}

/// Which file of a shot.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FileQuery {
    /// `full` (default), `preview` or `poster`.
    #[param(pattern = "^(full|preview|poster)$")]
    pub part: Option<String>,
}

/// `full`, `preview` or `poster`.
pub fn part(name: Option<&str>) -> Result<Part, ApiError> {
    match name.unwrap_or("full") {
        "full" => Ok(Part::Full),
        "preview" => Ok(Part::Preview),
        "poster" => Ok(Part::Poster),
        other => Err(ApiError::bad_request(
            "invalid_request",
            format!("part {other:?} is not full, preview or poster"),
        )),
    }
}

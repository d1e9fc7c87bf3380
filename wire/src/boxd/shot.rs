//! The `shot` service's request and answer: a screenshot or recording taken
//! in the box, of a page (Chromium) or of the box's virtual display (Xvfb
//! `:99`), and the limits both ends check ([`ShotRequest::check`]: the
//! server before it asks, boxd again when asked).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The narrowest page viewport, in CSS pixels.
pub const MIN_WIDTH: u32 = 320;
/// The widest page viewport.
pub const MAX_WIDTH: u32 = 3840;
/// The lowest page viewport.
pub const MIN_HEIGHT: u32 = 240;
/// The highest page viewport.
pub const MAX_HEIGHT: u32 = 2160;
/// The shortest recording, in seconds.
pub const MIN_SECONDS: u32 = 1;
/// The longest recording, in seconds.
pub const MAX_SECONDS: u32 = 60;
/// The longest URL taken.
pub const MAX_URL: usize = 8192;
/// The size of the box's virtual display (its screenshots and recordings;
/// `width` and `height` are ignored for it).
pub const DISPLAY_WIDTH: u32 = 1920;
pub const DISPLAY_HEIGHT: u32 = 1080;
/// A full-page screenshot is cut at this height.
pub const MAX_FULL_PAGE_HEIGHT: u32 = 16384;
/// How long a page may take to load (its `load` event) before the shot is
/// refused with 504.
pub const PAGE_LOAD: Duration = Duration::from_secs(30);
/// The largest file (and poster) boxd sends; a bigger one is refused with 413.
pub const MAX_FILE_BYTES: u64 = 200 << 20;
/// What the whole call may take past the page load and the recording
/// (starting the browser or the display, encoding, sending) under TCG: more
/// than boxd's own limits on those steps, so that boxd's refusal, which says
/// which step was slow, comes first. Measured on a shared 2-core machine: a
/// cold chromium start took up to 35 s, a page screenshot 60 s in all.
pub const SLACK: Duration = Duration::from_secs(120);

/// A screenshot or a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShotKind {
    #[default]
    Screenshot,
    Recording,
}

/// The container and codec of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VideoFormat {
    /// VP8 in WebM.
    #[default]
    Webm,
    /// H.264 in MP4 (fast start).
    Mp4,
}

impl VideoFormat {
    pub fn mime(self) -> &'static str {
        match self {
            Self::Webm => "video/webm",
            Self::Mp4 => "video/mp4",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Webm => "webm",
            Self::Mp4 => "mp4",
        }
    }
}

/// What to take: the JSON request of a `shot` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShotRequest {
    #[serde(default)]
    pub kind: ShotKind,
    /// The page (`http` or `https`, as the box reaches it: `http://localhost:3000`);
    /// none for the box's virtual display.
    #[serde(default)]
    pub url: Option<String>,
    /// The page's viewport in CSS pixels (ignored for the display).
    #[serde(default = "default_width")]
    pub width: u32,
    #[serde(default = "default_height")]
    pub height: u32,
    /// The whole page, not only its viewport (screenshots of a page only).
    #[serde(default)]
    pub full_page: bool,
    /// How long a recording lasts.
    #[serde(default = "default_seconds")]
    pub seconds: u32,
    /// A recording's format.
    #[serde(default)]
    pub format: VideoFormat,
}

fn default_width() -> u32 {
    1280
}

fn default_height() -> u32 {
    800
}

fn default_seconds() -> u32 {
    5
}

impl Default for ShotRequest {
    fn default() -> Self {
        Self {
            kind: ShotKind::Screenshot,
            url: None,
            width: default_width(),
            height: default_height(),
            full_page: false,
            seconds: default_seconds(),
            format: VideoFormat::Webm,
        }
    }
}

impl ShotRequest {
    /// Whether boxd takes it, or what is wrong with it (a sentence naming the
    /// field and its limits).
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_WIDTH..=MAX_WIDTH).contains(&self.width) {
            return Err(format!(
                "width {} is out of range: give {MIN_WIDTH} to {MAX_WIDTH} pixels",
                self.width
            ));
        }
        if !(MIN_HEIGHT..=MAX_HEIGHT).contains(&self.height) {
            return Err(format!(
                "height {} is out of range: give {MIN_HEIGHT} to {MAX_HEIGHT} pixels",
                self.height
            ));
        }
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) {
            return Err(format!(
                "seconds {} is out of range: a recording lasts {MIN_SECONDS} to {MAX_SECONDS} seconds",
                self.seconds
            ));
        }
        if self.full_page && (self.url.is_none() || self.kind != ShotKind::Screenshot) {
            return Err(
                "fullPage is for screenshots of a page only: give a url and kind \"screenshot\", or leave fullPage out"
                    .to_owned(),
            );
        }
        if let Some(url) = &self.url {
            check_url(url)?;
        }
        Ok(())
    }

    /// How long the whole shot may take: the page's load, the recording and
    /// [`SLACK`].
    pub fn time_limit(&self) -> Duration {
        let page = if self.url.is_some() {
            PAGE_LOAD
        } else {
            Duration::ZERO
        };
        let recording = match self.kind {
            ShotKind::Recording => Duration::from_secs(u64::from(self.seconds)),
            ShotKind::Screenshot => Duration::ZERO,
        };
        page + recording + SLACK
    }
}

/// The shape of a page's URL, as the API document publishes it: `http` or
/// `https`, a host name or IPv4 address (letters, digits, `.`, `-`), an
/// optional port, then a path, query or fragment of printable ASCII without
/// spaces. [`is_page_url`] takes exactly these.
pub const PAGE_URL_PATTERN: &str = "^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][!-~]*)?$";

/// Whether `url` has the shape of [`PAGE_URL_PATTERN`].
pub fn is_page_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let port_ok =
        port.is_none_or(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok && tail.bytes().all(|b| (b'!'..=b'~').contains(&b))
}

/// A page's URL, or what is wrong with it.
fn check_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL {
        return Err(format!("the url is longer than {MAX_URL} bytes"));
    }
    if !is_page_url(url) {
        return Err(format!(
            "the url {url:?} is not one psbx takes: give http(s)://, a host name (letters, digits, \
             dots, dashes), an optional port and a path without spaces or non-ASCII characters \
             (percent-encode them), such as http://localhost:3000/"
        ));
    }
    Ok(())
}

/// The first line of a `shot` answer (JSON and `\n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShotAnswer {
    /// The shot was taken: its file and poster follow.
    Shot(ShotHeader),
    /// It was not: nothing follows.
    Refused(ShotRefusal),
}

/// What was taken; the bytes of the file and of the poster follow its line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShotHeader {
    /// `image/png`, `video/webm` or `video/mp4`.
    pub mime: String,
    /// The file's size in pixels.
    pub width: u32,
    pub height: u32,
    /// A recording's length.
    pub duration_ms: Option<u64>,
    /// The file's length in bytes.
    pub bytes: u64,
    /// The PNG poster frame's length (recordings; 0 for screenshots).
    pub poster_bytes: u64,
}

/// Why a shot was not taken: a code as `OPEN_ERR` codes go and a reason a
/// person can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShotRefusal {
    pub code: u16,
    pub reason: String,
}

impl super::Streamed for ShotRequest {
    const SERVICE: super::Service = super::Service::Shot;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_camel_case_with_defaults() {
        let request = ShotRequest {
            kind: ShotKind::Recording,
            url: Some("http://localhost:3000/".into()),
            width: 1024,
            height: 768,
            full_page: false,
            seconds: 3,
            format: VideoFormat::Mp4,
        };
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(
            value,
            json!({"kind": "recording", "url": "http://localhost:3000/", "width": 1024,
                   "height": 768, "fullPage": false, "seconds": 3, "format": "mp4"})
        );
        assert_eq!(
            serde_json::from_value::<ShotRequest>(value).unwrap(),
            request
        );
        let bare: ShotRequest = serde_json::from_value(json!({})).unwrap();
        assert_eq!(bare, ShotRequest::default());
        assert_eq!(bare.check(), Ok(()));
        assert!(serde_json::from_value::<ShotRequest>(json!({"kind": "video"})).is_err());
    }

    #[test]
    fn answers_are_tagged_lines() {
        let shot = ShotAnswer::Shot(ShotHeader {
            mime: "video/webm".into(),
            width: 1280,
            height: 720,
            duration_ms: Some(3000),
            bytes: 10,
            poster_bytes: 5,
        });
        assert_eq!(
            serde_json::to_value(&shot).unwrap(),
            json!({"shot": {"mime": "video/webm", "width": 1280, "height": 720,
                            "durationMs": 3000, "bytes": 10, "posterBytes": 5}})
        );
        let refused = ShotAnswer::Refused(ShotRefusal {
            code: 504,
            reason: "slow".into(),
        });
        let text = serde_json::to_string(&refused).unwrap();
        assert_eq!(text, r#"{"refused":{"code":504,"reason":"slow"}}"#);
        assert_eq!(serde_json::from_str::<ShotAnswer>(&text).unwrap(), refused);
    }

    #[test]
    fn check_names_what_is_out_of_range() {
        let ok = ShotRequest::default();
        let bad = |f: fn(&mut ShotRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            r.check().unwrap_err()
        };
        assert!(bad(|r| r.width = MIN_WIDTH - 1).starts_with("width 319"));
        assert!(bad(|r| r.width = MAX_WIDTH + 1).contains("320 to 3840"));
        assert!(bad(|r| r.height = MIN_HEIGHT - 1).starts_with("height"));
        assert!(bad(|r| r.height = MAX_HEIGHT + 1).contains("240 to 2160"));
        for edge in [MIN_WIDTH, MAX_WIDTH] {
            assert_eq!(
                ShotRequest {
                    width: edge,
                    ..ok.clone()
                }
                .check(),
                Ok(())
            );
        }
        let recording = ShotRequest {
            kind: ShotKind::Recording,
            ..ok.clone()
        };
        for seconds in [0, MAX_SECONDS + 1] {
            let r = ShotRequest {
                seconds,
                ..recording.clone()
            };
            assert!(r.check().unwrap_err().contains("1 to 60 seconds"));
        }
        for seconds in [MIN_SECONDS, MAX_SECONDS] {
            let r = ShotRequest {
                seconds,
                ..recording.clone()
            };
            assert_eq!(r.check(), Ok(()));
        }
        // The range holds for screenshots too (the API document says so).
        assert!(
            ShotRequest {
                seconds: 0,
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        // fullPage: a screenshot of a page only.
        assert!(bad(|r| r.full_page = true).contains("fullPage"));
        let page = ShotRequest {
            url: Some("https://example.test/a?b#c".into()),
            full_page: true,
            ..ok.clone()
        };
        assert_eq!(page.check(), Ok(()));
        let recorded_page = ShotRequest {
            kind: ShotKind::Recording,
            ..page.clone()
        };
        assert!(recorded_page.check().unwrap_err().contains("fullPage"));
    }

    #[test]
    fn only_http_urls_with_a_host_are_taken() {
        for good in [
            "http://localhost:3000",
            "http://127.0.0.1/x",
            "https://box-abc.example.test/",
            "http://localhost:8080/?q=a%20b#top",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "localhost:3000",
            "http://",
            "http:///x",
            "http://:80/",
            "http://a b/",
            "http://a/\n",
            "chrome://settings",
            "HTTP://127.0.0.1/x",
            "http://user@localhost:8080/",
            "http://localhost:3000/café",
            "http://a:123456/",
            "http://a:/",
            " http://a/",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        let long = format!("http://a/{}", "x".repeat(MAX_URL));
        assert!(check_url(&long).unwrap_err().contains("longer"));
    }

    #[test]
    fn time_limits_cover_the_load_and_the_recording() {
        let display = ShotRequest::default();
        assert_eq!(display.time_limit(), SLACK);
        let page_recording = ShotRequest {
            kind: ShotKind::Recording,
            url: Some("http://localhost/".into()),
            seconds: 10,
            ..display
        };
        assert_eq!(
            page_recording.time_limit(),
            PAGE_LOAD + Duration::from_secs(10) + SLACK
        );
    }
}

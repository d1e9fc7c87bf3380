//! Screenshots and recordings taken in the box (the `shot` service,
//! `psbx_wire::boxd::ShotRequest`), into a temporary directory:
//!
//! * a page's screenshot: headless Chromium driven over DevTools
//!   ([`browser`], [`cdp`]) at the asked viewport, the whole page when
//!   `fullPage` (cut at 16384 px);
//! * the display's screenshot: one frame of Xvfb `:99` ([`display`]);
//! * a recording of the display, or of a page shown by a headed Chromium
//!   window at the display's top left ([`record`]), with a poster frame.
//!
//! Every program runs in a process group of its own that is killed when the
//! shot's future is dropped ([`tool`]): a shot the server gives up on leaves
//! nothing running. Page recordings share the display, so they take turns.
//!
//! The headless browser of the last page screenshot is kept for the next one
//! ([`KEEP_BROWSER`]): under TCG starting chromium takes seconds to tens of
//! seconds, a fresh page in a running one a fraction of that. Screenshots of
//! pages take turns on it; one that fails other than by the page's own error
//! (`net::ERR_...`) drops it, and a kept browser that broke is replaced once.

mod browser;
mod cdp;
pub mod display;
mod record;
mod tool;

use browser::{Browser, BrowserError, Mode};
use display::{Display, DisplayError};
use psbx_wire::boxd::shot::{
    DISPLAY_HEIGHT, DISPLAY_WIDTH, MAX_FILE_BYTES, MAX_FULL_PAGE_HEIGHT, PAGE_LOAD,
};
use psbx_wire::boxd::{ShotHeader, ShotKind, ShotRequest};
use psbx_wire::frame::code;
use record::{RecordError, Region};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;
use tool::ToolError;

/// How long the headless browser is kept unused before it is closed.
pub const KEEP_BROWSER: Duration = Duration::from_secs(120);
/// How often the kept browser's idle time is checked.
const REAP_EVERY: Duration = Duration::from_secs(10);

/// Why a shot was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ShotError {
    #[error("{0}")]
    Bad(String),
    #[error(transparent)]
    Browser(#[from] BrowserError),
    #[error(transparent)]
    Display(#[from] DisplayError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("chromium's screenshot is not base64 PNG data: {0}")]
    NotPng(String),
    #[error(
        "the {what} is {bytes} bytes, over the limit of {} MiB: take a smaller viewport or a shorter recording",
        MAX_FILE_BYTES >> 20
    )]
    TooBig { what: &'static str, bytes: u64 },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ShotError {
    /// The refusal's code, as `OPEN_ERR` codes go.
    pub fn code(&self) -> u16 {
        let tool = |e: &ToolError| match e {
            ToolError::Missing(_) => code::UNAVAILABLE,
            _ => code::BAD_GATEWAY,
        };
        match self {
            Self::Bad(_) => code::BAD_REQUEST,
            Self::Browser(BrowserError::Tool(e))
            | Self::Display(DisplayError::Tool(e))
            | Self::Record(RecordError::Tool(e)) => tool(e),
            Self::Browser(BrowserError::Load { .. }) => code::TIMEOUT,
            Self::TooBig { .. } => 413,
            Self::Io { .. } => 500,
            _ => code::BAD_GATEWAY,
        }
    }
}

/// A shot taken: its header and where its file and poster are.
#[derive(Debug)]
pub struct Taken {
    pub header: ShotHeader,
    pub file: PathBuf,
    pub poster: Option<PathBuf>,
}

/// What takes shots: the box's display, the turn for page recordings, and
/// the headless browser kept for the next page screenshot.
pub struct Shooter {
    display: Display,
    window: tokio::sync::Mutex<()>,
    headless: Arc<tokio::sync::Mutex<Kept>>,
    reaper: std::sync::OnceLock<()>,
}

/// The headless browser kept between screenshots, and when it was last used.
struct Kept {
    browser: Option<Browser>,
    used: Instant,
}

impl Shooter {
    /// Shots of display `:<display>` (the box's is [`display::BOX_DISPLAY`]).
    pub fn new(display: u32) -> Self {
        Self {
            display: Display::new(display),
            window: tokio::sync::Mutex::new(()),
            headless: Arc::new(tokio::sync::Mutex::new(Kept {
                browser: None,
                used: Instant::now(),
            })),
            reaper: std::sync::OnceLock::new(),
        }
    }

    /// The pid of the kept headless browser.
    #[cfg(test)]
    pub async fn kept_browser(&self) -> Option<u32> {
        self.headless
            .lock()
            .await
            .browser
            .as_ref()
            .and_then(Browser::pid)
    }

    /// A screenshot of `url` by the kept headless browser (or a new one).
    async fn page_screenshot(
        &self,
        request: &ShotRequest,
        url: &str,
        dir: &Path,
    ) -> Result<Taken, ShotError> {
        self.reaper.get_or_init(|| {
            tokio::spawn(reap(Arc::downgrade(&self.headless)));
        });
        let mut kept = self.headless.lock().await;
        // Out of the cache while it works: a shot dropped half-way kills it.
        let mut reused = kept.browser.take();
        if let Some(browser) = &mut reused
            && !browser.alive()
        {
            reused = None;
        }
        let was_reused = reused.is_some();
        let mut browser = match reused {
            Some(browser) => browser,
            None => Browser::start(Mode::Headless).await?,
        };
        let mut shot = screenshot(&mut browser, was_reused, request, url).await;
        if was_reused && matches!(shot, Err(ShotError::Browser(BrowserError::Crashed(_)))) {
            browser = Browser::start(Mode::Headless).await?;
            shot = screenshot(&mut browser, false, request, url).await;
        }
        let keep = match &shot {
            Ok(_) | Err(ShotError::Browser(BrowserError::Navigate { .. })) => true,
            Err(_) => false,
        };
        if keep {
            kept.browser = Some(browser);
            kept.used = Instant::now();
        }
        drop(kept);
        png_file(&shot?, dir).await
    }

    /// Takes the shot into the directory `dir`.
    pub async fn take(&self, request: &ShotRequest, dir: &Path) -> Result<Taken, ShotError> {
        request.check().map_err(ShotError::Bad)?;
        let taken = match (request.kind, &request.url) {
            (ShotKind::Screenshot, Some(url)) => self.page_screenshot(request, url, dir).await?,
            (ShotKind::Screenshot, None) => {
                let file = dir.join("display.png");
                self.display.grab(&file).await?;
                png_taken(file).await?
            }
            (ShotKind::Recording, url) => self.recording(request, url.as_deref(), dir).await?,
        };
        for path in std::iter::once(&taken.file).chain(&taken.poster) {
            size_of(path, "file").await?;
        }
        Ok(taken)
    }

    async fn recording(
        &self,
        request: &ShotRequest,
        url: Option<&str>,
        dir: &Path,
    ) -> Result<Taken, ShotError> {
        self.display.ensure().await?;
        let display = self.display.name();
        let file = dir.join(format!("recording.{}", request.format.extension()));
        match url {
            None => {
                let region = Region {
                    display: &display,
                    width: DISPLAY_WIDTH,
                    height: DISPLAY_HEIGHT,
                };
                record::record(&region, request.seconds, request.format, &file).await?;
            }
            Some(url) => {
                let _turn = self.window.lock().await;
                // The window fits the display.
                let (width, height) = (
                    request.width.min(DISPLAY_WIDTH),
                    request.height.min(DISPLAY_HEIGHT),
                );
                let mut browser = Browser::start(Mode::Window {
                    display: &display,
                    width,
                    height,
                })
                .await?;
                browser.open(url, PAGE_LOAD).await?;
                let region = Region {
                    display: &display,
                    width,
                    height,
                };
                record::record(&region, request.seconds, request.format, &file).await?;
                drop(browser);
            }
        }
        let probed = record::probe(&file).await?;
        let poster = dir.join("poster.png");
        record::poster(&file, request.seconds, &poster).await?;
        Ok(Taken {
            header: ShotHeader {
                mime: request.format.mime().to_owned(),
                width: probed.width,
                height: probed.height,
                duration_ms: Some(probed.duration_ms),
                bytes: size_of(&file, "recording").await?,
                poster_bytes: size_of(&poster, "poster").await?,
            },
            file,
            poster: Some(poster),
        })
    }
}

/// Closes the kept browser once it has not been used for [`KEEP_BROWSER`];
/// ends with its shooter.
async fn reap(kept: Weak<tokio::sync::Mutex<Kept>>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(kept) = kept.upgrade() else { return };
        let mut kept = kept.lock().await;
        if kept.browser.is_some() && kept.used.elapsed() >= KEEP_BROWSER {
            kept.browser = None;
        }
    }
}

/// A screenshot of `url` by a headless `browser` (on a fresh page when it
/// took one before): the PNG's base64 data.
async fn screenshot(
    browser: &mut Browser,
    fresh_page: bool,
    request: &ShotRequest,
    url: &str,
) -> Result<String, ShotError> {
    if fresh_page {
        browser.new_page().await?;
    }
    browser.viewport(request.width, request.height).await?;
    browser.open(url, PAGE_LOAD).await?;
    let params = if request.full_page {
        let metrics = browser.call("Page.getLayoutMetrics", json!({})).await?;
        let content = metrics
            .get("cssContentSize")
            .or_else(|| metrics.get("contentSize"))
            .unwrap_or(&Value::Null);
        let height = content
            .get("height")
            .and_then(Value::as_f64)
            .map_or(f64::from(request.height), f64::ceil)
            .clamp(1.0, f64::from(MAX_FULL_PAGE_HEIGHT));
        json!({
            "format": "png",
            "captureBeyondViewport": true,
            "clip": {"x": 0, "y": 0, "width": request.width, "height": height, "scale": 1},
        })
    } else {
        json!({"format": "png"})
    };
    let mut shot = browser.call("Page.captureScreenshot", params).await?;
    match shot.get_mut("data").map(Value::take) {
        Some(Value::String(data)) => Ok(data),
        _ => Err(ShotError::NotPng("no data".to_owned())),
    }
}

/// Writes a screenshot's base64 PNG `data` into `dir`.
async fn png_file(data: &str, dir: &Path) -> Result<Taken, ShotError> {
    if data.len() as u64 / 4 * 3 > MAX_FILE_BYTES {
        return Err(ShotError::TooBig {
            what: "screenshot",
            bytes: data.len() as u64 / 4 * 3,
        });
    }
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| ShotError::NotPng(e.to_string()))?;
    let file = dir.join("page.png");
    tokio::fs::write(&file, &png)
        .await
        .map_err(|source| ShotError::Io {
            what: format!("writing {}", file.display()),
            source,
        })?;
    png_taken(file).await
}

/// A PNG file's header (its size from its IHDR chunk).
async fn png_taken(file: PathBuf) -> Result<Taken, ShotError> {
    let mut head = [0u8; 24];
    {
        use tokio::io::AsyncReadExt;
        let mut f = tokio::fs::File::open(&file)
            .await
            .map_err(|source| ShotError::Io {
                what: format!("opening {}", file.display()),
                source,
            })?;
        f.read_exact(&mut head)
            .await
            .map_err(|_| ShotError::NotPng(format!("{} is too short", file.display())))?;
    }
    let (width, height) = png_size(&head)
        .ok_or_else(|| ShotError::NotPng(format!("{} does not start as a PNG", file.display())))?;
    Ok(Taken {
        header: ShotHeader {
            mime: "image/png".to_owned(),
            width,
            height,
            duration_ms: None,
            bytes: size_of(&file, "screenshot").await?,
            poster_bytes: 0,
        },
        file,
        poster: None,
    })
}

/// The width and height in a PNG's first 24 bytes (signature, IHDR).
pub fn png_size(head: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if head.len() < 24 || &head[..8] != SIGNATURE || &head[12..16] != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(head[16..20].try_into().ok()?);
    let height = u32::from_be_bytes(head[20..24].try_into().ok()?);
    Some((width, height))
}

/// A file's length, refused past [`MAX_FILE_BYTES`].
async fn size_of(path: &Path, what: &'static str) -> Result<u64, ShotError> {
    let bytes = tokio::fs::metadata(path)
        .await
        .map_err(|source| ShotError::Io {
            what: format!("reading the size of {}", path.display()),
            source,
        })?
        .len();
    if bytes > MAX_FILE_BYTES {
        return Err(ShotError::TooBig { what, bytes });
    }
    Ok(bytes)
}

#[cfg(test)]
pub(crate) mod tests;

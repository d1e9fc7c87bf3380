//! Chromium for a shot: started headless (page screenshots) or headed on the
//! virtual display (page recordings) with a throwaway profile, driven over
//! its DevTools WebSocket ([`super::cdp`]): its first page is attached
//! (flattened session), sized, sent to the URL, and waited for until its
//! `load` event and a moment of network quiet. A headless browser may take
//! shot after shot: [`Browser::new_page`] closes the page of the last one and
//! opens a fresh one. Dropping a [`Browser`] kills chromium's whole process
//! group and removes the profile.

use super::cdp::{Cdp, CdpError};
use super::tool::{Tool, ToolError};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::time::Instant;

/// The browser's program.
pub const CHROMIUM: &str = "chromium";
/// How long chromium may take to say where its DevTools listen (its first
/// start under TCG reads the whole binary from disk).
const START: Duration = Duration::from_secs(60);
/// How long a DevTools command may take.
const COMMAND: Duration = Duration::from_secs(30);
/// After the `load` event: at most this long for the network to go quiet.
const SETTLE: Duration = Duration::from_secs(3);
/// And then this long for late paint.
const PAINT: Duration = Duration::from_millis(300);

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("chromium did not start: {0}")]
    NoDevTools(String),
    #[error("chromium: {0}")]
    Cdp(#[from] CdpError),
    #[error("chromium did not answer {method} within {}s", COMMAND.as_secs())]
    Slow { method: String },
    #[error("chromium ended: {0}")]
    Crashed(String),
    #[error("chromium has no page to drive")]
    NoPage,
    #[error("the page {url} could not be opened: {error}")]
    Navigate { url: String, error: String },
    #[error("the page {url} did not load within {}s (its load event did not fire)", limit.as_secs())]
    Load { url: String, limit: Duration },
    #[error("cannot make chromium's profile directory: {0}")]
    Profile(#[source] std::io::Error),
}

/// How chromium shows its page.
pub enum Mode<'a> {
    /// No window; the page's viewport is set over DevTools.
    Headless,
    /// A window of `width` × `height` at the top left of X display `display`
    /// (`:99`), in app mode (no tabs, no address bar).
    Window {
        display: &'a str,
        width: u32,
        height: u32,
    },
}

/// A running chromium and the DevTools session of its page.
pub struct Browser {
    cdp: Cdp,
    session: String,
    /// The page [`Browser::new_page`] opened last (closed by the next one).
    opened: Option<String>,
    // Dropped in this order: the connection, chromium, then its profile.
    tool: Tool,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start(mode: Mode<'_>) -> Result<Self, BrowserError> {
        let profile = tempfile::Builder::new()
            .prefix("psbx-chromium-")
            .tempdir()
            .map_err(BrowserError::Profile)?;
        let mut args: Vec<String> = [
            "--no-sandbox",
            // No "unsupported command-line flag" bar over the page.
            "--test-type",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            "--password-store=basic",
            "--mute-audio",
        ]
        .map(String::from)
        .to_vec();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let display = match mode {
            Mode::Headless => {
                args.extend(
                    ["--headless=new", "--hide-scrollbars", "about:blank"].map(String::from),
                );
                None
            }
            Mode::Window {
                display,
                width,
                height,
            } => {
                args.push("--window-position=0,0".to_owned());
                args.push(format!("--window-size={width},{height}"));
                // An app window (no tabs, no address bar); about:blank opens a tab.
                args.push("--app=data:text/html,".to_owned());
                Some(display)
            }
        };
        let env = [("DISPLAY", display)];
        let mut tool = Tool::spawn("chromium", CHROMIUM, &args, &env, Stdio::null())?;
        let url = tokio::time::timeout(START, devtools_address(&mut tool))
            .await
            .map_err(|_| {
                BrowserError::NoDevTools(format!(
                    "it did not open its DevTools within {}s: {}",
                    START.as_secs(),
                    tool.stderr_tail()
                ))
            })?
            .ok_or_else(|| BrowserError::NoDevTools(tool.stderr_tail()))?;
        let mut cdp = Cdp::connect(&url).await?;
        let session = attach(&mut cdp).await?;
        let mut browser = Self {
            cdp,
            session,
            opened: None,
            tool,
            _profile: profile,
        };
        browser.enable().await?;
        Ok(browser)
    }

    /// Page events on for the current page.
    async fn enable(&mut self) -> Result<(), BrowserError> {
        self.call("Page.enable", json!({})).await?;
        self.call("Page.setLifecycleEventsEnabled", json!({"enabled": true}))
            .await?;
        Ok(())
    }

    #[cfg(test)]
    pub fn pid(&self) -> Option<u32> {
        self.tool.pid()
    }

    /// Whether chromium is still running.
    pub fn alive(&mut self) -> bool {
        !self.tool.exited()
    }

    /// Drives a new blank page from now on, closing the one opened before
    /// (the first page stays: a browser with no page may end).
    pub async fn new_page(&mut self) -> Result<(), BrowserError> {
        if let Some(old) = self.opened.take() {
            let close = browser_call(
                &mut self.cdp,
                "Target.closeTarget",
                json!({"targetId": old}),
            );
            close.await?;
        }
        let created = browser_call(
            &mut self.cdp,
            "Target.createTarget",
            json!({"url": "about:blank"}),
        )
        .await?;
        let target = created
            .get("targetId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(BrowserError::NoPage)?;
        self.opened = Some(target.clone());
        self.session = attach_to(&mut self.cdp, &target).await?;
        self.enable().await
    }

    /// Sends a command to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, BrowserError> {
        let call = self.cdp.call(Some(&self.session), method, params);
        match tokio::time::timeout(COMMAND, call).await {
            Ok(answer) => answer.map_err(|e| self.failed(e)),
            Err(_) => Err(BrowserError::Slow {
                method: method.to_owned(),
            }),
        }
    }

    /// A DevTools failure, with chromium's last words when it is gone.
    fn failed(&self, e: CdpError) -> BrowserError {
        match e {
            CdpError::Closed | CdpError::WebSocket(_) => {
                BrowserError::Crashed(self.tool.stderr_tail())
            }
            other => other.into(),
        }
    }

    /// Sets the page's viewport (headless).
    pub async fn viewport(&mut self, width: u32, height: u32) -> Result<(), BrowserError> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await
        .map(drop)
    }

    /// Opens `url` and waits up to `limit` for its `load` event, then for the
    /// network to go quiet (at most [`SETTLE`]) and [`PAINT`] more.
    pub async fn open(&mut self, url: &str, limit: Duration) -> Result<(), BrowserError> {
        let deadline = Instant::now() + limit;
        let slow = || BrowserError::Load {
            url: url.to_owned(),
            limit,
        };
        self.cdp.forget_events();
        let call = self
            .cdp
            .call(Some(&self.session), "Page.navigate", json!({"url": url}));
        let answer = tokio::time::timeout_at(deadline, call)
            .await
            .map_err(|_| slow())?
            .map_err(|e| self.failed(e))?;
        if let Some(error) = answer
            .get("errorText")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
        {
            return Err(BrowserError::Navigate {
                url: url.to_owned(),
                error: error.to_owned(),
            });
        }
        let loader = answer
            .get("loaderId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let load = self
            .cdp
            .event(&self.session, "Page.loadEventFired", |_| true);
        tokio::time::timeout_at(deadline, load)
            .await
            .map_err(|_| slow())?
            .map_err(|e| self.failed(e))?;
        let idle = self.cdp.event(&self.session, "Page.lifecycleEvent", |p| {
            p.get("name").and_then(Value::as_str) == Some("networkIdle")
                && (loader.is_none()
                    || p.get("loaderId").and_then(Value::as_str) == loader.as_deref())
        });
        // A page that keeps the network busy is shot as it is then.
        if let Ok(Err(e)) = tokio::time::timeout(SETTLE, idle).await {
            return Err(self.failed(e));
        }
        tokio::time::sleep(PAINT).await;
        Ok(())
    }
}

/// The `ws://` address chromium prints on stderr, `None` if it ends first.
async fn devtools_address(tool: &mut Tool) -> Option<String> {
    const PREFIX: &str = "DevTools listening on ";
    while let Some(line) = tool.next_line().await {
        if let Some(at) = line.find(PREFIX) {
            return Some(line[at + PREFIX.len()..].trim().to_owned());
        }
    }
    None
}

/// Attaches to the browser's first page: a flattened session id.
async fn attach(cdp: &mut Cdp) -> Result<String, BrowserError> {
    let started = Instant::now();
    // The first page may show up a moment after DevTools listen.
    let target = loop {
        let targets = browser_call(cdp, "Target.getTargets", json!({})).await?;
        let page = targets
            .get("targetInfos")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|t| t.get("type").and_then(Value::as_str) == Some("page"))
            .and_then(|t| t.get("targetId").and_then(Value::as_str))
            .map(str::to_owned);
        match page {
            Some(page) => break page,
            None if started.elapsed() < COMMAND => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => return Err(BrowserError::NoPage),
        }
    };
    attach_to(cdp, &target).await
}

/// A flattened session on page `target`.
async fn attach_to(cdp: &mut Cdp, target: &str) -> Result<String, BrowserError> {
    let attached = browser_call(
        cdp,
        "Target.attachToTarget",
        json!({"targetId": target, "flatten": true}),
    )
    .await?;
    attached
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or(BrowserError::NoPage)
}

/// A command to the browser itself, within [`COMMAND`].
async fn browser_call(
    cdp: &mut Cdp,
    method: &'static str,
    params: Value,
) -> Result<Value, BrowserError> {
    match tokio::time::timeout(COMMAND, cdp.call(None, method, params)).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(BrowserError::Slow {
            method: method.to_owned(),
        }),
    }
}

//! The box's virtual display: Xvfb on `:99` (the image starts it at boot
//! through `xvfb.service`; boxd starts it on demand when nothing answers on
//! its socket, and keeps it), and one frame of it as a PNG (ffmpeg
//! `x11grab`). The display number is a parameter so tests use a free one.

use super::tool::{Tool, ToolError};
use psbx_wire::boxd::shot::{DISPLAY_HEIGHT, DISPLAY_WIDTH};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The box's display.
pub const BOX_DISPLAY: u32 = 99;
/// How long Xvfb may take to open its socket.
const START: Duration = Duration::from_secs(20);
/// How long a one-frame grab may take.
const GRAB: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("Xvfb did not open display :{number} within {}s{}", START.as_secs(), stderr_of(stderr))]
    NoSocket { number: u32, stderr: String },
}

fn stderr_of(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// An X display, and the Xvfb boxd started for it (if it had to).
pub struct Display {
    number: u32,
    xvfb: tokio::sync::Mutex<Option<Tool>>,
}

impl Display {
    pub fn new(number: u32) -> Self {
        Self {
            number,
            xvfb: tokio::sync::Mutex::new(None),
        }
    }

    /// Its name, `:99`.
    pub fn name(&self) -> String {
        format!(":{}", self.number)
    }

    fn socket(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/.X11-unix/X{}", self.number))
    }

    /// Makes sure an X server answers on the display, starting Xvfb when
    /// none does.
    pub async fn ensure(&self) -> Result<(), DisplayError> {
        let mut xvfb = self.xvfb.lock().await;
        if answers(&self.socket()).await {
            return Ok(());
        }
        // Ours ended (or never was): start it again.
        *xvfb = None;
        let screen = format!("{DISPLAY_WIDTH}x{DISPLAY_HEIGHT}x24");
        let name = self.name();
        let args = [
            name.as_str(),
            "-screen",
            "0",
            screen.as_str(),
            "-nolisten",
            "tcp",
        ];
        let mut tool = Tool::spawn_gentle("Xvfb", "Xvfb", args)?;
        let deadline = tokio::time::Instant::now() + START;
        while tokio::time::Instant::now() < deadline {
            if answers(&self.socket()).await {
                *xvfb = Some(tool);
                return Ok(());
            }
            if tool.exited() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(DisplayError::NoSocket {
            number: self.number,
            stderr: tool.stderr_tail(),
        })
    }

    /// One frame of the whole display, as a PNG file at `out`.
    pub async fn grab(&self, out: &Path) -> Result<(), DisplayError> {
        self.ensure().await?;
        let size = format!("{DISPLAY_WIDTH}x{DISPLAY_HEIGHT}");
        let args = [
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "x11grab",
            "-draw_mouse",
            "0",
            "-video_size",
            &size,
            "-i",
            &self.name(),
            "-frames:v",
            "1",
            "-c:v",
            "png",
            "-f",
            "image2",
            "-y",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([out.display().to_string()])
        .collect::<Vec<_>>();
        super::tool::run("ffmpeg", "ffmpeg", &args, &[], GRAB).await?;
        Ok(())
    }
}

/// Whether an X server accepts connections on `socket`.
async fn answers(socket: &Path) -> bool {
    tokio::net::UnixStream::connect(socket).await.is_ok()
}

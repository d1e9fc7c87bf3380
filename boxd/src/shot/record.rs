//! Recordings: `seconds` of a region of the virtual display grabbed by
//! ffmpeg (`x11grab`, [`FRAME_RATE`] frames a second) and encoded as it goes
//! with settings that keep up under TCG on two vCPUs (VP8 realtime at its
//! fastest, or x264 ultrafast), scaled to at most [`MAX_RECORDED_WIDTH`]
//! wide; then a PNG poster frame from its middle and the facts ffprobe reads
//! back (duration, size), which also proves the file plays.

use super::tool::{self, ToolError};
use psbx_wire::boxd::VideoFormat;
use std::path::Path;
use std::time::Duration;

/// Frames a second grabbed.
pub const FRAME_RATE: u32 = 10;
/// Recordings wider than this are scaled down (the display's 1920 is more
/// than a viewer needs and more than TCG encodes in real time).
pub const MAX_RECORDED_WIDTH: u32 = 1280;
/// How long ffmpeg may take past the recording's own length to finish it.
const FINISH: Duration = Duration::from_secs(60);
/// How long the poster and the probe may take.
const AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("ffprobe cannot read the recording ffmpeg made: {0}")]
    Unreadable(String),
}

/// A region of a display: `width` × `height` at its top left.
pub struct Region<'a> {
    pub display: &'a str,
    pub width: u32,
    pub height: u32,
}

/// What ffprobe says of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    pub width: u32,
    pub height: u32,
    pub duration_ms: u64,
}

/// The size a region is recorded at: at most [`MAX_RECORDED_WIDTH`] wide,
/// the aspect kept, both even (yuv420p wants them so).
pub fn recorded_size(width: u32, height: u32) -> (u32, u32) {
    let (w, h) = if width > MAX_RECORDED_WIDTH {
        let h = u64::from(height) * u64::from(MAX_RECORDED_WIDTH) / u64::from(width);
        (MAX_RECORDED_WIDTH, u32::try_from(h).unwrap_or(height))
    } else {
        (width, height)
    };
    ((w / 2 * 2).max(2), (h / 2 * 2).max(2))
}

/// ffmpeg's arguments for recording `seconds` of `region` to `out`.
pub fn arguments(
    region: &Region<'_>,
    seconds: u32,
    format: VideoFormat,
    out: &Path,
) -> Vec<String> {
    let (w, h) = recorded_size(region.width, region.height);
    let mut args: Vec<String> = [
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "x11grab",
        "-draw_mouse",
        "0",
        "-framerate",
    ]
    .map(String::from)
    .to_vec();
    args.push(FRAME_RATE.to_string());
    args.push("-video_size".to_owned());
    args.push(format!("{}x{}", region.width, region.height));
    args.push("-i".to_owned());
    args.push(format!("{}+0,0", region.display));
    args.push("-t".to_owned());
    args.push(seconds.to_string());
    args.push("-vf".to_owned());
    args.push(format!("scale={w}:{h}:flags=fast_bilinear"));
    args.push("-pix_fmt".to_owned());
    args.push("yuv420p".to_owned());
    let codec: &[&str] = match format {
        VideoFormat::Webm => &[
            "-c:v",
            "libvpx",
            "-deadline",
            "realtime",
            "-cpu-used",
            "16",
            "-b:v",
            "1500k",
            "-lag-in-frames",
            "0",
            "-auto-alt-ref",
            "0",
            "-threads",
            "2",
            "-f",
            "webm",
        ],
        VideoFormat::Mp4 => &[
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-tune",
            "zerolatency",
            "-movflags",
            "+faststart",
            "-f",
            "mp4",
        ],
    };
    args.extend(codec.iter().map(|a| (*a).to_owned()));
    args.push("-y".to_owned());
    args.push(out.display().to_string());
    args
}

/// Records `seconds` of `region` into `out`.
pub async fn record(
    region: &Region<'_>,
    seconds: u32,
    format: VideoFormat,
    out: &Path,
) -> Result<(), RecordError> {
    let args = arguments(region, seconds, format, out);
    let limit = Duration::from_secs(u64::from(seconds)) + FINISH;
    tool::run("ffmpeg", "ffmpeg", &args, &[], limit).await?;
    Ok(())
}

/// A PNG frame from the middle of the recording `video` (`seconds` long).
pub async fn poster(video: &Path, seconds: u32, out: &Path) -> Result<(), RecordError> {
    let at = format!("{:.1}", f64::from(seconds) / 2.0);
    let args = [
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-ss",
        &at,
        "-i",
        &video.display().to_string(),
        "-frames:v",
        "1",
        "-c:v",
        "png",
        "-f",
        "image2",
        "-y",
        &out.display().to_string(),
    ]
    .map(str::to_owned);
    tool::run("ffmpeg", "ffmpeg", &args, &[], AFTER).await?;
    Ok(())
}

/// The recording's size and duration, as ffprobe reads them.
pub async fn probe(video: &Path) -> Result<Probed, RecordError> {
    let args = [
        "-v",
        "error",
        "-select_streams",
        "v:0",
        "-show_entries",
        "format=duration:stream=width,height",
        "-of",
        "json",
        &video.display().to_string(),
    ]
    .map(str::to_owned);
    let out = tool::output("ffprobe", "ffprobe", &args, AFTER).await?;
    parse_probe(&out)
}

fn parse_probe(out: &[u8]) -> Result<Probed, RecordError> {
    let value: serde_json::Value = serde_json::from_slice(out)
        .map_err(|e| RecordError::Unreadable(format!("its answer is not JSON: {e}")))?;
    let stream = &value["streams"][0];
    let dimension = |key: &str| {
        stream[key]
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| RecordError::Unreadable(format!("no video stream {key}")))
    };
    let seconds: f64 = value["format"]["duration"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .filter(|d: &f64| d.is_finite() && *d > 0.0)
        .ok_or_else(|| RecordError::Unreadable("no duration".to_owned()))?;
    Ok(Probed {
        width: dimension("width")?,
        height: dimension("height")?,
        // Whole milliseconds of a positive, finite duration.
        duration_ms: (seconds * 1000.0).round() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_are_at_most_1280_wide_and_even() {
        assert_eq!(recorded_size(1920, 1080), (1280, 720));
        assert_eq!(recorded_size(1023, 767), (1022, 766));
        assert_eq!(recorded_size(3840, 2160), (1280, 720));
        assert_eq!(recorded_size(320, 240), (320, 240));
    }

    #[test]
    fn the_probe_answer_is_read() {
        let out = br#"{"programs":[],"streams":[{"width":1280,"height":720}],"format":{"duration":"2.900000"}}"#;
        assert_eq!(
            parse_probe(out).unwrap(),
            Probed {
                width: 1280,
                height: 720,
                duration_ms: 2900
            }
        );
        assert!(parse_probe(br#"{"streams":[],"format":{}}"#).is_err());
        assert!(parse_probe(b"nope").is_err());
    }

    #[test]
    fn arguments_grab_the_region_and_pick_the_codec() {
        let region = Region {
            display: ":5",
            width: 800,
            height: 600,
        };
        let args = arguments(&region, 3, VideoFormat::Mp4, Path::new("/tmp/x.mp4")).join(" ");
        assert!(
            args.contains("-video_size 800x600 -i :5+0,0 -t 3"),
            "{args}"
        );
        assert!(args.contains("libx264"), "{args}");
        assert!(args.ends_with("-y /tmp/x.mp4"), "{args}");
        let args = arguments(&region, 3, VideoFormat::Webm, Path::new("/tmp/x.webm")).join(" ");
        assert!(
            args.contains("libvpx") && args.contains("-f webm"),
            "{args}"
        );
    }
}

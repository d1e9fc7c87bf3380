//! What psbx takes from boxd as a shot, checked before anything is stored
//! (security review 2, M2 and L5): boxd runs in the box, so its answer is
//! the box's word. A screenshot is `image/png` and opens with PNG's
//! signature; a recording is the format that was asked for, `video/webm`
//! opening with EBML's `1A 45 DF A3` or `video/mp4` with `ftyp` at offset
//! 4, and its poster is a PNG. The media type stored (and served as
//! `Content-Type`, and written into agents' text) is psbx's own constant,
//! never boxd's string.
//!
//! Only the first bytes are checked here; a PNG is also decoded for its
//! preview (`super::preview`), and a video is never decoded by psbx.

use psbx_wire::boxd::{ShotHeader, ShotKind, ShotRequest, VideoFormat};

/// A PNG file's first eight bytes.
pub const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
/// An EBML (WebM, Matroska) file's first four bytes.
pub const EBML_MAGIC: [u8; 4] = [0x1A, 0x45, 0xDF, 0xA3];

/// Whether `head` (a file's first bytes) opens a recording in `format`.
pub fn is_video(format: VideoFormat, head: &[u8]) -> bool {
    match format {
        VideoFormat::Webm => head.starts_with(&EBML_MAGIC),
        VideoFormat::Mp4 => head.get(4..8) == Some(b"ftyp".as_slice()),
    }
}

/// Whether `head` opens a PNG.
pub fn is_png(head: &[u8]) -> bool {
    head.starts_with(&PNG_SIGNATURE)
}

/// The media type psbx stores for what `request` asked for, once boxd's
/// answer (its `header`, the first bytes of its file and poster) is that;
/// otherwise why not, a sentence about what boxd sent.
pub fn checked_mime(
    request: &ShotRequest,
    header: &ShotHeader,
    file_head: &[u8],
    poster_head: Option<&[u8]>,
) -> Result<&'static str, String> {
    let expected = match request.kind {
        ShotKind::Screenshot => "image/png",
        ShotKind::Recording => request.format.mime(),
    };
    if header.mime != expected {
        return Err(format!(
            "boxd answered a {} with media type {}, not {expected}",
            kind_name(request),
            shown(&header.mime)
        ));
    }
    let file_ok = match request.kind {
        ShotKind::Screenshot => is_png(file_head),
        ShotKind::Recording => is_video(request.format, file_head),
    };
    if !file_ok {
        return Err(format!(
            "boxd's {} does not open as {expected} does (its first bytes are {})",
            kind_name(request),
            hex(file_head)
        ));
    }
    if let Some(head) = poster_head
        && !is_png(head)
    {
        return Err(format!(
            "boxd's poster frame is not a PNG (its first bytes are {})",
            hex(head)
        ));
    }
    Ok(expected)
}

fn kind_name(request: &ShotRequest) -> &'static str {
    match request.kind {
        ShotKind::Screenshot => "screenshot",
        ShotKind::Recording => "recording",
    }
}

/// A box-chosen string as a message may show it: quoted, escaped, at most
/// 40 characters.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(40).collect();
    let more = if cut.len() < text.len() { "..." } else { "" };
    format!("{cut:?}{more}")
}

fn hex(head: &[u8]) -> String {
    if head.is_empty() {
        return "none: the file is empty".to_owned();
    }
    head.iter()
        .take(8)
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(mime: &str) -> ShotHeader {
        ShotHeader {
            mime: mime.to_owned(),
            width: 64,
            height: 48,
            duration_ms: None,
            bytes: 10,
            poster_bytes: 0,
        }
    }

    fn recording(format: VideoFormat) -> ShotRequest {
        ShotRequest {
            kind: ShotKind::Recording,
            format,
            ..ShotRequest::default()
        }
    }

    #[test]
    fn recordings_are_known_by_their_magic_bytes() {
        let webm = [0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81];
        let mp4 = *b"\0\0\0\x20ftypisom";
        assert!(is_video(VideoFormat::Webm, &webm));
        assert!(!is_video(VideoFormat::Mp4, &webm));
        assert!(is_video(VideoFormat::Mp4, &mp4));
        assert!(!is_video(VideoFormat::Webm, &mp4));
        assert!(!is_video(VideoFormat::Webm, b"fake recording"));
        assert!(!is_video(VideoFormat::Mp4, b"ftyp"));
        let png = PNG_SIGNATURE.as_slice();
        let asked = recording(VideoFormat::Webm);
        assert_eq!(
            checked_mime(&asked, &header("video/webm"), &webm, Some(png)),
            Ok("video/webm")
        );
        let e = checked_mime(&asked, &header("video/webm"), b"<html>", Some(png)).unwrap_err();
        assert!(e.contains("3C 68 74 6D"), "{e}");
        let e = checked_mime(&asked, &header("video/webm"), &webm, Some(b"GIF89a")).unwrap_err();
        assert!(e.contains("poster"), "{e}");
    }

    #[test]
    fn the_media_type_is_the_server_s_own_never_boxd_s() {
        let png = PNG_SIGNATURE.as_slice();
        let screenshot = ShotRequest::default();
        assert_eq!(
            checked_mime(&screenshot, &header("image/png"), png, None),
            Ok("image/png")
        );
        for mime in [
            "text/html",
            "image/png; charset=x",
            "IMAGE/PNG",
            "video/webm",
        ] {
            let e = checked_mime(&screenshot, &header(mime), png, None).unwrap_err();
            assert!(e.contains("not image/png"), "{e}");
        }
        let e = checked_mime(
            &recording(VideoFormat::Mp4),
            &header("video/webm"),
            b"\0\0\0\x20ftypisom",
            None,
        )
        .unwrap_err();
        assert!(e.contains("not video/mp4"), "{e}");
        let long = "x".repeat(1000);
        let e = checked_mime(&screenshot, &header(&long), png, None).unwrap_err();
        assert!(e.len() < 200, "{e}");
    }
}

//! Images made from shots with the `image` crate (PNG only): the preview an
//! agent gets inline (at most [`PREVIEW_MAX`] px on its long side, never a
//! multi-megabyte blob) and the check of an image a reviewer sends.
//!
//! The images come from boxes and people, so decoding one is bounded three
//! ways (security review 2, M1): the size read from the header first
//! ([`MAX_WIDTH`] x [`MAX_HEIGHT`]), then `image::Limits` with
//! [`MAX_DECODE_BYTES`] for the decoder, and the async calls
//! ([`preview_file`], [`preview_png`]) run on tokio's blocking threads, at
//! most [`DECODING`] at once over the whole server: an inflate and resize of
//! seconds never holds an HTTP worker, and a flood of shots waits for a
//! permit instead of taking all the memory.

use ::image::{ImageFormat, ImageReader, Limits, imageops::FilterType};
use std::io::{BufRead, BufReader, Cursor, Seek};
use std::path::PathBuf;
use tokio::sync::Semaphore;

/// The long side of a preview.
pub const PREVIEW_MAX: u32 = 1280;
/// The widest image taken: a page is at most 3840 CSS px wide, and the
/// display 1920; twice that leaves room for a high-density screen.
pub const MAX_WIDTH: u32 = 7680;
/// The highest image taken: a full-page screenshot is cut at 16384 px.
pub const MAX_HEIGHT: u32 = 16384;
/// What the decoder may allocate for one image (its pixels included): a
/// full page 3840 x 16384 in RGBA fits.
pub const MAX_DECODE_BYTES: u64 = 256 << 20;
/// Images decoded at once on this server.
pub const DECODING: usize = 2;

/// The server's decoding permits.
static PERMITS: Semaphore = Semaphore::const_new(DECODING);

/// An image's size, and its preview when it is larger than one.
pub type SizeAndPreview = ((u32, u32), Option<Vec<u8>>);

/// What is wrong with an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image is not a PNG psbx can read: {0}")]
    Unreadable(String),
    #[error(
        "the image is {width}x{height} px: at most {MAX_WIDTH} px wide and {MAX_HEIGHT} px high"
    )]
    TooLarge { width: u32, height: u32 },
    #[error("could not encode the preview: {0}")]
    Encode(String),
    #[error("could not read the image: {0}")]
    Io(#[from] std::io::Error),
}

fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_WIDTH);
    limits.max_image_height = Some(MAX_HEIGHT);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    limits
}

fn reader<R: BufRead + Seek>(input: R) -> ImageReader<R> {
    let mut reader = ImageReader::with_format(input, ImageFormat::Png);
    reader.limits(limits());
    reader
}

/// The size of a PNG, read from its header (the whole image is not decoded).
pub fn png_size(png: &[u8]) -> Result<(u32, u32), ImageError> {
    size_of(Cursor::new(png))
}

fn size_of<R: BufRead + Seek>(input: R) -> Result<(u32, u32), ImageError> {
    let mut decoder = ImageReader::with_format(input, ImageFormat::Png);
    decoder.no_limits();
    let (width, height) = decoder
        .into_dimensions()
        .map_err(|e| ImageError::Unreadable(e.to_string()))?;
    if width > MAX_WIDTH || height > MAX_HEIGHT {
        return Err(ImageError::TooLarge { width, height });
    }
    Ok((width, height))
}

/// A copy of the PNG at most [`PREVIEW_MAX`] px on its long side, or `None`
/// when it is that small already (the image is its own preview). Decodes
/// on the calling thread: async code calls [`preview_png`].
pub fn preview(png: &[u8]) -> Result<Option<Vec<u8>>, ImageError> {
    preview_of(|| Ok(Cursor::new(png))).map(|(_, preview)| preview)
}

/// The image's size and preview; `open` gives the image from its start
/// (once for the header, once more to decode).
fn preview_of<R: BufRead + Seek>(
    open: impl Fn() -> std::io::Result<R>,
) -> Result<SizeAndPreview, ImageError> {
    let (width, height) = size_of(open()?)?;
    if width.max(height) <= PREVIEW_MAX {
        return Ok(((width, height), None));
    }
    let image = reader(open()?)
        .decode()
        .map_err(|e| ImageError::Unreadable(e.to_string()))?;
    let small = image.resize(PREVIEW_MAX, PREVIEW_MAX, FilterType::Triangle);
    drop(image);
    let mut out = Vec::new();
    small
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(((width, height), Some(out)))
}

/// Runs `f` on a blocking thread once a decoding permit is free.
async fn decoding<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ImageError> + Send + 'static,
) -> Result<T, ImageError> {
    let _permit = PERMITS
        .acquire()
        .await
        .map_err(|e| ImageError::Unreadable(format!("no decoding permit: {e}")))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ImageError::Unreadable(format!("the decoding task failed: {e}")))?
}

/// The size and preview of the PNG file at `path` (a shot as it arrived),
/// decoded off the async threads, read from the file in pieces.
pub async fn preview_file(path: PathBuf) -> Result<SizeAndPreview, ImageError> {
    decoding(move || preview_of(|| std::fs::File::open(&path).map(BufReader::new))).await
}

/// A PNG held in memory (an image a reviewer sent), handed back with its
/// size and preview, decoded off the async threads.
pub async fn preview_png(png: Vec<u8>) -> Result<Previewed, ImageError> {
    decoding(move || {
        let (size, preview) = preview_of(|| Ok(Cursor::new(png.as_slice())))?;
        Ok(Previewed { png, size, preview })
    })
    .await
}

/// A PNG with its size and preview ([`preview_png`]).
pub struct Previewed {
    pub png: Vec<u8>,
    pub size: (u32, u32),
    pub preview: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(width, height, |x, _| {
            if x < width / 2 {
                image::Rgb([255, 0, 0])
            } else {
                image::Rgb([0, 0, 255])
            }
        });
        let mut out = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn small_images_are_their_own_preview() {
        assert!(preview(&png(1280, 800)).unwrap().is_none());
        assert!(preview(&png(390, 1280)).unwrap().is_none());
    }

    #[test]
    fn big_images_shrink_to_1280_on_their_long_side() {
        let small = preview(&png(1920, 4000)).unwrap().unwrap();
        assert_eq!(png_size(&small).unwrap(), (614, 1280));
        let decoded = image::load_from_memory(&small).unwrap().to_rgb8();
        assert_eq!(decoded.get_pixel(10, 640).0, [255, 0, 0]);
        assert_eq!(decoded.get_pixel(600, 640).0, [0, 0, 255]);
    }

    #[test]
    fn refuses_what_is_not_a_png() {
        assert!(matches!(
            png_size(b"GIF89a..."),
            Err(ImageError::Unreadable(_))
        ));
        assert!(preview(b"").is_err());
    }
}

//! Images made from shots with the `image` crate (PNG only): the preview an
//! agent gets inline (at most [`PREVIEW_MAX`] px on its long side, never a
//! multi-megabyte blob) and the check of an image a reviewer sends.

use ::image::{ImageFormat, imageops::FilterType};
use std::io::Cursor;

/// The long side of a preview.
pub const PREVIEW_MAX: u32 = 1280;
/// The largest image a reviewer may send, per side.
pub const UPLOAD_MAX_SIDE: u32 = 16384;

/// What is wrong with an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image is not a PNG psbx can read: {0}")]
    Unreadable(String),
    #[error("the image is {width}x{height} px: at most {UPLOAD_MAX_SIDE} px per side")]
    TooLarge { width: u32, height: u32 },
    #[error("could not encode the preview: {0}")]
    Encode(String),
}

/// The size of a PNG, read from its header (the whole image is not decoded).
pub fn png_size(png: &[u8]) -> Result<(u32, u32), ImageError> {
    let reader = ::image::ImageReader::with_format(Cursor::new(png), ImageFormat::Png);
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| ImageError::Unreadable(e.to_string()))?;
    if width > UPLOAD_MAX_SIDE || height > UPLOAD_MAX_SIDE {
        return Err(ImageError::TooLarge { width, height });
    }
    Ok((width, height))
}

/// A copy of the PNG at most [`PREVIEW_MAX`] px on its long side, or `None`
/// when it is that small already (the image is its own preview).
pub fn preview(png: &[u8]) -> Result<Option<Vec<u8>>, ImageError> {
    let (width, height) = png_size(png)?;
    if width.max(height) <= PREVIEW_MAX {
        return Ok(None);
    }
    let image = ::image::load_from_memory_with_format(png, ImageFormat::Png)
        .map_err(|e| ImageError::Unreadable(e.to_string()))?;
    let small = image.resize(PREVIEW_MAX, PREVIEW_MAX, FilterType::Triangle);
    let mut out = Vec::new();
    small
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(Some(out))
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

//! Files that come with a message: what an adapter reports of them
//! ([`Attachment`]), and why fetching one failed ([`FetchError`]).
//!
//! An adapter only describes a file and, when asked, fetches its bytes
//! ([`Channel::fetch_attachment`](crate::Channel::fetch_attachment)). Whether
//! it is fetched at all (only for admitted messages, within the chat's size
//! cap), where it is saved and what the model is told are the gateway's
//! decisions.

use serde::{Deserialize, Serialize};

/// What kind of file the platform says it is. The model is shown images as
/// images (when it can see them); every kind is saved and named by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachmentKind {
    /// A picture (Telegram photo, an image attached on Discord).
    Image,
    /// Any other file.
    Document,
    /// A music or audio file.
    Audio,
    /// A voice note recorded in the app.
    Voice,
    Video,
}

impl AttachmentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentKind::Image => "image",
            AttachmentKind::Document => "document",
            AttachmentKind::Audio => "audio",
            AttachmentKind::Voice => "voice",
            AttachmentKind::Video => "video",
        }
    }
}

/// A file sent with a message, as the platform describes it; nothing of it is
/// downloaded until the gateway asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
    /// The file name as the sender gave it (or one the adapter made up, such
    /// as `photo.jpg`). Untrusted: the gateway sanitises it before it names a
    /// file or appears in a prompt.
    #[serde(default)]
    pub name: String,
    /// The media type the platform reports (`image/jpeg`), when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The size in bytes the platform reports, when it does: a file over the
    /// cap is refused without being downloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// How the adapter finds the file again (Telegram's `file_id`, Discord's
    /// attachment URL). Opaque to the gateway.
    pub reference: String,
}

/// Why an attachment's bytes could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Larger than the cap the gateway gave: nothing was kept.
    #[error("the file is {size} bytes, over the limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    /// The channel cannot fetch files, or will not fetch this one (a URL
    /// outside the platform's file servers).
    #[error("{0}")]
    Refused(String),
    /// The platform or the network failed.
    #[error("{0}")]
    Failed(String),
}

/// Reads a download chunk by chunk into memory, refusing it as soon as it
/// passes `max` bytes: adapters use it so a file whose announced size lied
/// is never held beyond the cap.
#[derive(Debug, Default)]
pub struct CappedBytes {
    bytes: Vec<u8>,
    max: u64,
}

impl CappedBytes {
    pub fn new(max: u64) -> CappedBytes {
        CappedBytes { bytes: Vec::new(), max }
    }

    /// Adds a chunk; [`FetchError::TooLarge`] (with the size so far) once over the cap.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        let size = (self.bytes.len() + chunk.len()) as u64;
        if size > self.max {
            return Err(FetchError::TooLarge { size, max: self.max });
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_is_cut_as_soon_as_it_passes_the_cap() {
        let mut bytes = CappedBytes::new(5);
        assert_eq!(bytes.push(b"abc"), Ok(()));
        assert_eq!(bytes.push(b"de"), Ok(()));
        assert_eq!(bytes.push(b"f"), Err(FetchError::TooLarge { size: 6, max: 5 }));
        assert_eq!(bytes.into_bytes(), b"abcde");
    }
}

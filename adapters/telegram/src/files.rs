//! Files people send: `getFile` for the file's path on Telegram's servers,
//! then the download from `<api>/file/bot<token>/<path>` (the Bot API base
//! the bot talks to, never another host), cut as soon as it passes the cap.

use bub_channel::{Attachment, CappedBytes, FetchError};
use futures_util::StreamExt;
use teloxide_core::net::Download;
use teloxide_core::prelude::Requester;
use teloxide_core::types::FileId;
use teloxide_core::{ApiError, Bot, RequestError};

/// The bytes of `attachment` (its reference is a `file_id`), at most `max` of them.
pub(crate) async fn fetch(bot: &Bot, attachment: &Attachment, max: u64) -> Result<Vec<u8>, FetchError> {
    if let Some(size) = attachment.size.filter(|size| *size > max) {
        return Err(FetchError::TooLarge { size, max });
    }
    let file = bot.get_file(FileId(attachment.reference.clone())).await.map_err(|error| match error {
        // The Bot API serves files up to 20 MB; a local Bot API server has no such limit.
        RequestError::Api(ApiError::Unknown(description)) if description.contains("too big") => {
            FetchError::Failed(format!("Telegram will not hand out a file this large ({description})"))
        }
        other => FetchError::Failed(format!("Telegram getFile failed: {other}")),
    })?;
    if file.meta.size != u32::MAX && u64::from(file.meta.size) > max {
        return Err(FetchError::TooLarge { size: u64::from(file.meta.size), max });
    }
    let mut stream = bot.download_file_stream(&file.path);
    let mut bytes = CappedBytes::new(max);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| FetchError::Failed(format!("downloading from Telegram failed: {error}")))?;
        bytes.push(&chunk)?;
    }
    Ok(bytes.into_bytes())
}

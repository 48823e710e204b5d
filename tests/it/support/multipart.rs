//! `multipart/form-data` bodies read the way a platform reads them: each part
//! by its field name, with a file's name, type and bytes (binary-safe). Used
//! by the fake Telegram (`sendPhoto`, `sendDocument`, forms) and the fake
//! Discord (messages with attachments: `payload_json` and `files[n]`).

/// One part of a form.
#[derive(Debug, Clone)]
pub struct Part {
    /// The form field (`chat_id`, `photo`, `files[0]`, `payload_json`).
    pub name: String,
    /// The file's name, for a file part.
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Part {
    /// The body as text (lossy), for a text field.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The boundary of a `multipart/form-data` content type, if it is one.
pub fn boundary(content_type: &str) -> Option<String> {
    if !content_type.trim_start().to_ascii_lowercase().starts_with("multipart/form-data") {
        return None;
    }
    let (_, rest) = content_type.split_once("boundary=")?;
    Some(rest.split(';').next().unwrap_or_default().trim().trim_matches('"').to_string())
}

/// The parts of `body`; malformed parts are skipped.
pub fn parse(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&body[at..], &delimiter) {
        starts.push(at + found);
        at += found + delimiter.len();
    }
    for pair in starts.windows(2) {
        let segment = &body[pair[0] + delimiter.len()..pair[1]];
        let segment = segment.strip_prefix(b"\r\n").unwrap_or(segment);
        let segment = segment.strip_suffix(b"\r\n").unwrap_or(segment);
        let Some(split) = find(segment, b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&segment[..split]).into_owned();
        let mut part =
            Part { name: String::new(), filename: None, content_type: None, body: segment[split + 4..].to_vec() };
        for line in head.lines() {
            let Some((header, value)) = line.split_once(':') else { continue };
            match header.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => {
                    part.name = parameter(value, "name").unwrap_or_default();
                    part.filename = parameter(value, "filename");
                }
                "content-type" => part.content_type = Some(value.trim().to_string()),
                _ => {}
            }
        }
        parts.push(part);
    }
    parts
}

/// `key="value"` out of a header's parameters.
fn parameter(header: &str, key: &str) -> Option<String> {
    header.split(';').find_map(|item| {
        let (name, value) = item.trim().split_once('=')?;
        (name.trim() == key).then(|| value.trim().trim_matches('"').to_string())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

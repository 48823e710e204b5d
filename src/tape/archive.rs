//! JSON-lines export of a tape: one entry per line, `{id, kind, payload, meta,
//! date}`, readable by a person (`less`) and by a script (`jq`).

use super::error::{TapeError, TapeResult};
use super::handle::Tape;
use super::query::TapeQuery;
use chrono::Utc;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Entries read per page, so an export never holds the whole tape in memory.
pub const PAGE: usize = 1000;

/// A tape as JSON lines, a page of entries at a time, oldest first (each
/// page one read by id range). Owns its handle, so a stream of pages (the
/// admin console's export) can outlive the request that started it.
pub struct JsonlPages {
    tape: Tape,
    after: u64,
    done: bool,
    written: u64,
}

impl JsonlPages {
    pub fn new(tape: &Tape) -> JsonlPages {
        JsonlPages { tape: tape.clone(), after: 0, done: false, written: 0 }
    }

    /// Entries in the pages returned so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The next page's lines; `None` after the last entry.
    pub async fn next(&mut self) -> TapeResult<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        let page = self.tape.read(&TapeQuery::all().after_id(self.after).limit(PAGE)).await?;
        let mut lines = Vec::new();
        for entry in &page {
            // Entries are JSON values already: serializing them into memory cannot fail.
            serde_json::to_writer(&mut lines, entry).map_err(|e| TapeError::Corrupt {
                tape: self.tape.name().clone(),
                id: entry.id,
                location: self.tape.store().location(),
                reason: e.to_string(),
            })?;
            lines.push(b'\n');
        }
        self.written += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE => self.after = last.id,
            _ => self.done = true,
        }
        Ok(Some(lines))
    }
}

/// Writes every entry of `tape` to `out`, oldest first; returns how many.
/// `target` names the destination in errors. `out` is written on the
/// caller's thread (the CLI's export); [`archive`] writes off the runtime.
pub async fn write_jsonl(tape: &Tape, out: &mut (dyn Write + Send), target: &Path) -> TapeResult<u64> {
    let io_error = |source| TapeError::Archive { tape: tape.name().clone(), path: target.to_path_buf(), source };
    let mut pages = JsonlPages::new(tape);
    while let Some(lines) = pages.next().await? {
        out.write_all(&lines).map_err(io_error)?;
    }
    out.flush().map_err(io_error)?;
    Ok(pages.written)
}

/// Archives `tape` to `<dir>/<file stem>.jsonl.<YYYYmmddTHHMMSSZ>.bak`. The file
/// is written under a temporary name and renamed when complete, so a failed
/// archive never leaves a partial file that looks finished. The file work
/// runs on tokio's blocking pool, never on a runtime thread that serves turns.
pub async fn archive(tape: &Tape, dir: &Path) -> TapeResult<PathBuf> {
    use tokio::io::AsyncWriteExt;
    let stamp = Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
    let path = dir.join(format!("{}.jsonl.{stamp}.bak", tape.name().file_stem()));
    let io_error = |source| TapeError::Archive { tape: tape.name().clone(), path: path.clone(), source };
    tokio::fs::create_dir_all(dir).await.map_err(io_error)?;
    let partial = path.with_extension("bak.partial");
    let file = tokio::fs::File::create(&partial).await.map_err(io_error)?;
    let written: TapeResult<()> = async {
        let mut out = tokio::io::BufWriter::new(file);
        let mut pages = JsonlPages::new(tape);
        while let Some(lines) = pages.next().await? {
            out.write_all(&lines).await.map_err(io_error)?;
        }
        out.flush().await.map_err(io_error)?;
        out.into_inner().sync_all().await.map_err(io_error)
    }
    .await;
    if let Err(error) = written {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(error);
    }
    tokio::fs::rename(&partial, &path).await.map_err(io_error)?;
    Ok(path)
}

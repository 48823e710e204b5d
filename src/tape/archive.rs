//! JSON-lines export of a tape: one entry per line, `{id, kind, payload, meta,
//! date}`, readable by a person (`less`) and by a script (`jq`).

use super::error::{TapeError, TapeResult};
use super::handle::Tape;
use super::query::TapeQuery;
use chrono::Utc;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Entries read per page, so an export never holds the whole tape in memory.
const PAGE: usize = 1000;

/// Writes every entry of `tape` to `out`, oldest first; returns how many.
/// `target` names the destination in errors.
pub async fn write_jsonl(tape: &Tape, out: &mut (dyn Write + Send), target: &Path) -> TapeResult<u64> {
    let io_error = |source| TapeError::Archive { tape: tape.name().clone(), path: target.to_path_buf(), source };
    let mut written = 0;
    let mut after = 0;
    loop {
        let page = tape.read(&TapeQuery::all().after_id(after).limit(PAGE)).await?;
        for entry in &page {
            serde_json::to_writer(&mut *out, entry).map_err(|e| io_error(e.into()))?;
            out.write_all(b"\n").map_err(io_error)?;
        }
        written += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE => after = last.id,
            _ => break,
        }
    }
    out.flush().map_err(io_error)?;
    Ok(written)
}

/// Archives `tape` to `<dir>/<file stem>.jsonl.<YYYYmmddTHHMMSSZ>.bak`. The file
/// is written under a temporary name and renamed when complete, so a failed
/// archive never leaves a partial file that looks finished.
pub async fn archive(tape: &Tape, dir: &Path) -> TapeResult<PathBuf> {
    let stamp = Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
    let path = dir.join(format!("{}.jsonl.{stamp}.bak", tape.name().file_stem()));
    let io_error = |source| TapeError::Archive { tape: tape.name().clone(), path: path.clone(), source };
    std::fs::create_dir_all(dir).map_err(io_error)?;
    let partial = path.with_extension("bak.partial");
    let file = std::fs::File::create(&partial).map_err(io_error)?;
    let mut out = std::io::BufWriter::new(file);
    let result = write_jsonl(tape, &mut out, &path).await;
    let synced =
        result.and_then(|_| out.into_inner().map_err(|e| io_error(e.into_error()))?.sync_all().map_err(io_error));
    if let Err(error) = synced {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    std::fs::rename(&partial, &path).map_err(io_error)?;
    Ok(path)
}

//! The id through a file every rank sees (`GPUKIT_ID_FILE`): rank 0 writes it atomically,
//! the others poll until a whole file of their own run appears.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use gpukit_core::{Error, Result};

use super::{back_off, left, LaunchEnv, ID_LEN, MAGIC, MAX_RUN_ID, OP_SHARE, VERSION};

/// Magic, version, run id length (u16); the run id and the id follow.
const FILE_HEAD_LEN: usize = 8 + 2 + 2;

/// The run id as the id file holds it: its first [`MAX_RUN_ID`] bytes.
fn run_id_bytes(run_id: &str) -> &[u8] {
    &run_id.as_bytes()[..run_id.len().min(MAX_RUN_ID)]
}

/// The file: magic, version, run id length (u16), run id, id.
pub(super) fn encode_file(run_id: &str, id: &[u8; ID_LEN]) -> Vec<u8> {
    let run_id = run_id_bytes(run_id);
    let mut bytes = Vec::with_capacity(FILE_HEAD_LEN + run_id.len() + ID_LEN);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(run_id.len() as u16).to_le_bytes());
    bytes.extend_from_slice(run_id);
    bytes.extend_from_slice(id);
    bytes
}

/// The id in `bytes` if they are a whole id file of run `run_id`, else what they are.
pub(super) fn decode_file(bytes: &[u8], run_id: &str) -> std::result::Result<[u8; ID_LEN], String> {
    if bytes.len() < FILE_HEAD_LEN || bytes[..8] != MAGIC {
        return Err(format!(
            "it holds {} bytes that are not a gpukit id file",
            bytes.len()
        ));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != VERSION {
        return Err(format!(
            "it is a version {version} id file; this process reads version {VERSION}"
        ));
    }
    let len = usize::from(u16::from_le_bytes([bytes[10], bytes[11]]));
    if bytes.len() != FILE_HEAD_LEN + len + ID_LEN {
        return Err(format!(
            "it holds {} bytes, not a whole id file",
            bytes.len()
        ));
    }
    let found = &bytes[FILE_HEAD_LEN..FILE_HEAD_LEN + len];
    if found != run_id_bytes(run_id) {
        return Err(format!(
            "it is from another run ({:?}; this run is {run_id:?})",
            String::from_utf8_lossy(found)
        ));
    }
    let mut id = [0; ID_LEN];
    id.copy_from_slice(&bytes[FILE_HEAD_LEN + len..]);
    Ok(id)
}

pub(super) fn via_file(
    env: &LaunchEnv,
    path: &Path,
    make: impl FnOnce() -> Result<[u8; ID_LEN]>,
    deadline: Instant,
    timeout: Duration,
) -> Result<[u8; ID_LEN]> {
    let run_id = env.run_id.as_deref().unwrap_or("");
    if env.rank == 0 {
        let id = make()?;
        write_atomically(path, &encode_file(run_id, &id)).map_err(|e| {
            invalid!(
                OP_SHARE,
                "GPUKIT_ID_FILE",
                "rank 0 cannot write the id file {}: {e}",
                path.display()
            )
        })?;
        return Ok(id);
    }
    let mut pause = Duration::from_millis(10);
    loop {
        let seen = match read_small(path, FILE_HEAD_LEN + MAX_RUN_ID + ID_LEN + 1) {
            Ok(bytes) => match decode_file(&bytes, run_id) {
                Ok(id) => return Ok(id),
                Err(what) => what,
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => "it does not exist".to_string(),
            Err(e) => format!("it cannot be read: {e}"),
        };
        if left(deadline).is_none() {
            return Err(invalid!(
                OP_SHARE,
                "timeout",
                "rank {}: no id from rank 0 in {} after {timeout:?}: {seen}; check that rank \
                 0 runs and that GPUKIT_ID_FILE names the same file on every node",
                env.rank,
                path.display(),
            ));
        }
        back_off(&mut pause, deadline);
    }
}

/// Reads at most `limit` bytes of the file.
fn read_small(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(limit as u64)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes a temporary file next to `path` and renames it over `path`: readers see all of
/// the new file or none of it.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = path.with_file_name(temp_name);
    let written = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

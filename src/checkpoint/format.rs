//! The checkpoint file's layout (version 1, little-endian; `docs/checkpoints.md` has the
//! table): a fixed header, the metadata as JSON, one record per buffer (length, bytes, CRC-32),
//! and a trailer. Everything here is pure: it encodes and checks bytes, and the writer and the
//! reader move them between the device and the file.

use gpuworld_systems::error::CheckpointError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The first eight bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"GPUWCKPT";

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// The first eight bytes of the trailer.
pub(crate) const END_MAGIC: [u8; 8] = *b"GPUWDONE";

/// Bytes of the header: magic, version, flags, metadata length, metadata CRC, header CRC.
pub(crate) const HEADER_LEN: u64 = 32;

/// Bytes of the trailer: end magic, file length, CRC of the buffers' CRCs, trailer CRC.
pub(crate) const TRAILER_LEN: u64 = 24;

/// Bytes around each buffer's contents: its length before, its CRC-32 after.
pub(crate) const RECORD_OVERHEAD: u64 = 12;

/// The longest metadata section read: a longer length is a corrupted header, not an
/// allocation to attempt.
const MAX_METADATA_LEN: u64 = 1 << 30;

/// The header as decoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata_len: u64,
    pub metadata_crc: u32,
}

/// The 32 header bytes for a metadata section of `metadata`.
pub(crate) fn encode_header(metadata: &[u8]) -> [u8; HEADER_LEN as usize] {
    let mut header = [0u8; HEADER_LEN as usize];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    // 12..16: flags, none defined in version 1.
    header[16..24].copy_from_slice(&(metadata.len() as u64).to_le_bytes());
    header[24..28].copy_from_slice(&crc32fast::hash(metadata).to_le_bytes());
    let crc = crc32fast::hash(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The header in `bytes` (the file's first bytes, up to 32) of a file of `file_len` bytes,
/// checked in the order that names the problem best: magic, version, length, checksum.
pub(crate) fn decode_header(
    path: &Arc<str>,
    bytes: &[u8],
    file_len: u64,
) -> Result<Header, CheckpointError> {
    let magic_part = &bytes[..bytes.len().min(8)];
    if magic_part != &MAGIC[..magic_part.len()] {
        return Err(CheckpointError::NotACheckpoint {
            path: path.clone(),
            found: magic_part.to_vec(),
        });
    }
    if bytes.len() < HEADER_LEN as usize {
        return Err(truncated(path, file_len, "the header", HEADER_LEN));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(CheckpointError::UnsupportedVersion {
            path: path.clone(),
            version,
            supported: VERSION,
        });
    }
    let stored = u32_at(bytes, 28);
    let computed = crc32fast::hash(&bytes[0..28]);
    if stored != computed {
        return Err(mismatch(path, "the header", stored, computed));
    }
    let flags = u32_at(bytes, 12);
    if flags != 0 {
        return Err(corrupted(
            path,
            "the header",
            format!("has flags {flags:#x}; version 1 defines none"),
        ));
    }
    let metadata_len = u64_at(bytes, 16);
    if metadata_len > MAX_METADATA_LEN {
        return Err(corrupted(
            path,
            "the header",
            format!(
                "declares {metadata_len} bytes of metadata, more than the {MAX_METADATA_LEN} allowed"
            ),
        ));
    }
    Ok(Header {
        version,
        metadata_len,
        metadata_crc: u32_at(bytes, 24),
    })
}

/// The 24 trailer bytes of a file of `file_len` bytes whose buffers have `crcs`.
pub(crate) fn encode_trailer(file_len: u64, crcs: &[u32]) -> [u8; TRAILER_LEN as usize] {
    let mut trailer = [0u8; TRAILER_LEN as usize];
    trailer[0..8].copy_from_slice(&END_MAGIC);
    trailer[8..16].copy_from_slice(&file_len.to_le_bytes());
    trailer[16..20].copy_from_slice(&crc_of_crcs(crcs).to_le_bytes());
    let crc = crc32fast::hash(&trailer[0..20]);
    trailer[20..24].copy_from_slice(&crc.to_le_bytes());
    trailer
}

/// Checks the trailer `bytes` of a file of `file_len` bytes whose buffers had `crcs`.
pub(crate) fn check_trailer(
    path: &Arc<str>,
    bytes: &[u8; TRAILER_LEN as usize],
    file_len: u64,
    crcs: &[u32],
) -> Result<(), CheckpointError> {
    let stored = u32_at(bytes, 20);
    let computed = crc32fast::hash(&bytes[0..20]);
    if stored != computed {
        return Err(mismatch(path, "the trailer", stored, computed));
    }
    if bytes[0..8] != END_MAGIC {
        return Err(corrupted(
            path,
            "the trailer",
            "lacks its `GPUWDONE` mark".into(),
        ));
    }
    let declared = u64_at(bytes, 8);
    if declared != file_len {
        return Err(corrupted(
            path,
            "the trailer",
            format!("declares a file of {declared} bytes; the file has {file_len}"),
        ));
    }
    let stored = u32_at(bytes, 16);
    let computed = crc_of_crcs(crcs);
    if stored != computed {
        return Err(mismatch(
            path,
            "the list of buffer checksums",
            stored,
            computed,
        ));
    }
    Ok(())
}

fn crc_of_crcs(crcs: &[u32]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for crc in crcs {
        hasher.update(&crc.to_le_bytes());
    }
    hasher.finalize()
}

/// The metadata section as stored: where the run came from, the user's metadata and the
/// buffers in order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Metadata {
    /// The backend the checkpoint was taken on (`cpu`, `wgpu`, ...).
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// The user's tick number.
    pub tick: u64,
    /// The user's RNG state, as lowercase hex.
    pub rng_state: String,
    /// The user's application data, as lowercase hex.
    pub app_data: String,
    /// The buffers, in the order their records follow.
    pub buffers: Vec<BufferEntry>,
}

/// One buffer as the metadata lists it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct BufferEntry {
    pub name: String,
    pub len: u64,
    pub stream: u64,
}

impl Metadata {
    /// Parses and checks the metadata bytes.
    pub(crate) fn decode(path: &Arc<str>, bytes: &[u8]) -> Result<Metadata, CheckpointError> {
        let metadata: Metadata = serde_json::from_slice(bytes).map_err(|error| {
            corrupted(
                path,
                "the metadata",
                format!("is not valid metadata JSON: {error}"),
            )
        })?;
        for (name, field) in [
            ("rng_state", &metadata.rng_state),
            ("app_data", &metadata.app_data),
        ] {
            if decode_hex(field).is_none() {
                return Err(corrupted(
                    path,
                    "the metadata",
                    format!("has a `{name}` that is not hex"),
                ));
            }
        }
        Ok(metadata)
    }

    /// The offset of each buffer's record, and the file's whole length, for `metadata_len`.
    pub(crate) fn layout(&self, metadata_len: u64) -> (Vec<u64>, u64) {
        let mut offset = HEADER_LEN + metadata_len;
        let mut offsets = Vec::with_capacity(self.buffers.len());
        for buffer in &self.buffers {
            offsets.push(offset);
            offset = offset
                .saturating_add(RECORD_OVERHEAD)
                .saturating_add(buffer.len);
        }
        (offsets, offset.saturating_add(TRAILER_LEN))
    }
}

/// How buffer `index` is named in messages: `buffer 1 ("vel")`.
pub(crate) fn buffer_section(index: usize, name: &str) -> String {
    format!("buffer {index} ({name:?})")
}

/// `bytes` as lowercase hex.
pub(crate) fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 15)] as char);
    }
    text
}

/// The bytes of lowercase or uppercase hex `text`; `None` when it is not hex.
pub(crate) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| {
            let high = char::from(pair[0]).to_digit(16)?;
            let low = char::from(pair[1]).to_digit(16)?;
            u8::try_from(high * 16 + low).ok()
        })
        .collect()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// `CheckpointError::Truncated` for a file of `len` bytes ending inside `section`.
pub(crate) fn truncated(path: &Arc<str>, len: u64, section: &str, needed: u64) -> CheckpointError {
    CheckpointError::Truncated {
        path: path.clone(),
        len,
        section: section.into(),
        needed,
    }
}

/// `CheckpointError::Corrupted` of `section`.
pub(crate) fn corrupted(path: &Arc<str>, section: &str, problem: String) -> CheckpointError {
    CheckpointError::Corrupted {
        path: path.clone(),
        section: section.into(),
        problem: problem.into(),
    }
}

/// `CheckpointError::Corrupted` for a checksum that does not match.
pub(crate) fn mismatch(
    path: &Arc<str>,
    section: &str,
    stored: u32,
    computed: u32,
) -> CheckpointError {
    corrupted(
        path,
        section,
        format!("does not match its checksum: CRC-32 {computed:08x}, stored {stored:08x}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let bytes = [0u8, 1, 0xab, 0xff, 0x10];
        assert_eq!(encode_hex(&bytes), "0001abff10");
        assert_eq!(decode_hex("0001abff10").as_deref(), Some(&bytes[..]));
        assert_eq!(decode_hex("0g"), None);
        assert_eq!(decode_hex("abc"), None);
    }

    #[test]
    fn a_header_decodes_to_what_was_encoded() {
        let path: Arc<str> = "x".into();
        let header = encode_header(b"{}");
        let decoded = decode_header(&path, &header, 100).unwrap();
        assert_eq!(decoded.metadata_len, 2);
        assert_eq!(decoded.metadata_crc, crc32fast::hash(b"{}"));
    }
}

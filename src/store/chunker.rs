//! Content-defined chunking: files go into the store as FastCDC chunks, so
//! an edit in the middle of a file changes only the chunks around it and the
//! rest deduplicates against earlier versions.

use std::io::{Read, Write};

use fastcdc::v2020::StreamCDC;

use super::{ChunkId, ChunkStore, StoreError};

/// Smallest chunk FastCDC cuts (except the last one of a file).
pub const MIN_CHUNK: u32 = 4 * 1024;
/// Target average: small enough that a one-line edit rewrites ~16 KiB,
/// large enough that the index stays at ~64 rows per MiB.
pub const AVG_CHUNK: u32 = 16 * 1024;
/// Largest chunk FastCDC cuts.
pub const MAX_CHUNK: u32 = 64 * 1024;

/// Leading byte of [`ContentRef::encode_chunks`], bumped if the layout changes.
const CHUNK_LIST_FORMAT: u8 = 1;

/// One chunk of a file's content, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkSpan {
    pub id: ChunkId,
    pub len: u32,
}

/// A file's content as stored: its whole hash (to recognise unchanged
/// content without reading chunks), its size and its chunks in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRef {
    /// blake3 of the whole content.
    pub hash: ChunkId,
    pub size: u64,
    pub chunks: Vec<ChunkSpan>,
}

impl ContentRef {
    /// The two columns a content reference is kept as in the metadata
    /// (`ObjectState::content`, known contents, pending files): the whole
    /// hash and the encoded chunk list.
    pub fn to_columns(&self) -> (Vec<u8>, Vec<u8>) {
        (self.hash.as_bytes().to_vec(), self.encode_chunks())
    }

    /// Inverse of [`ContentRef::to_columns`]: rejects a malformed chunk
    /// list or hash; the size is the sum of the chunks'.
    pub fn from_columns(hash: &[u8], chunks: &[u8]) -> Result<ContentRef, StoreError> {
        let chunks = ContentRef::decode_chunks(chunks)?;
        let hash = ChunkId::from_slice(hash)?;
        Ok(ContentRef { hash, size: chunks.iter().map(|s| s.len as u64).sum(), chunks })
    }

    /// The span list in a compact form for a SQLite BLOB: a format byte, a
    /// varint count, then per chunk its 32-byte id and a varint length
    /// (about 35 bytes per 16 KiB chunk).
    pub fn encode_chunks(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 5 + self.chunks.len() * (ChunkId::LEN + 3));
        out.push(CHUNK_LIST_FORMAT);
        put_varint(&mut out, self.chunks.len() as u64);
        for span in &self.chunks {
            out.extend_from_slice(span.id.as_bytes());
            put_varint(&mut out, u64::from(span.len));
        }
        out
    }

    /// Decodes [`ContentRef::encode_chunks`] output, rejecting anything
    /// truncated, trailing, zero-length or of an unknown format.
    pub fn decode_chunks(bytes: &[u8]) -> Result<Vec<ChunkSpan>, StoreError> {
        let err = |detail: String| StoreError::Decode { what: "chunk list", detail };
        let (&format, mut rest) = bytes.split_first().ok_or_else(|| err("empty".to_string()))?;
        if format != CHUNK_LIST_FORMAT {
            return Err(err(format!("unknown format {format}")));
        }
        let count = take_varint(&mut rest).ok_or_else(|| err("bad chunk count".to_string()))?;
        // Each span takes at least 33 bytes; refusing impossible counts
        // keeps a damaged count from sizing a huge allocation.
        if count > (rest.len() / (ChunkId::LEN + 1)) as u64 {
            return Err(err(format!("{count} chunks cannot fit in {} bytes", rest.len())));
        }
        let mut spans = Vec::with_capacity(count as usize);
        for i in 0..count {
            let (id, tail) = rest.split_at_checked(ChunkId::LEN).ok_or_else(|| err(format!("chunk {i} truncated")))?;
            rest = tail;
            let id = ChunkId::from_slice(id)?;
            let len = take_varint(&mut rest)
                .and_then(|l| u32::try_from(l).ok())
                .filter(|&l| l > 0)
                .ok_or_else(|| err(format!("chunk {i} has a bad length")))?;
            spans.push(ChunkSpan { id, len });
        }
        if !rest.is_empty() {
            return Err(err(format!("{} trailing bytes", rest.len())));
        }
        Ok(spans)
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in input.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        if i == 9 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *input = &input[i + 1..];
            return Some(value);
        }
    }
    None
}

/// Hashes everything read through it, so the whole-content hash comes from
/// the same single pass as the chunks.
struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
    size: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

/// Chunks everything `reader` yields into `store`, holding at most one
/// maximum-size chunk in memory, and returns how to find it again.
pub fn store_content(store: &dyn ChunkStore, reader: impl Read) -> Result<ContentRef, StoreError> {
    store_content_added(store, reader).map(|(content, _)| content)
}

/// As [`store_content`], also returning the chunks this call added to the
/// store (and no other content had), which a caller whose next step fails
/// takes back with [`ChunkStore::discard`].
pub fn store_content_added(
    store: &dyn ChunkStore,
    reader: impl Read,
) -> Result<(ContentRef, Vec<ChunkId>), StoreError> {
    let mut hashing = HashingReader { inner: reader, hasher: blake3::Hasher::new(), size: 0 };
    let mut chunks = Vec::new();
    // What this call added: taken back if it fails part-way, so that a
    // refused write leaves the store as it was (the caller makes sure no
    // other content is stored meanwhile).
    let mut added = Vec::new();
    let mut stream = StreamCDC::new(&mut hashing, MIN_CHUNK as usize, AVG_CHUNK as usize, MAX_CHUNK as usize);
    let stored = (|| {
        for chunk in &mut stream {
            let chunk = chunk.map_err(|e| StoreError::io("reading content to chunk", e.into()))?;
            let (id, new) = store.put_new(&chunk.data)?;
            if new {
                added.push(id);
            }
            // StreamCDC never yields more than MAX_CHUNK bytes.
            let len = u32::try_from(chunk.length).unwrap_or(u32::MAX);
            chunks.push(ChunkSpan { id, len });
        }
        Ok::<(), StoreError>(())
    })();
    drop(stream);
    if let Err(e) = stored {
        if let Err(d) = store.discard(&added) {
            log::warn!("cannot take back the {} chunks of a content stored part-way: {d}", added.len());
        }
        return Err(e);
    }
    let hash = ChunkId::from_bytes(*hashing.hasher.finalize().as_bytes());
    log::debug!("Stored content {hash} of {} bytes as {} chunks.", hashing.size, chunks.len());
    Ok((ContentRef { hash, size: hashing.size, chunks }, added))
}

/// Fetches a chunk and checks it has the length the span promised.
fn get_span(store: &dyn ChunkStore, span: &ChunkSpan) -> Result<Vec<u8>, StoreError> {
    let data = store.get(&span.id)?;
    if data.len() != span.len as usize {
        return Err(StoreError::corrupt(
            span.id,
            format!("chunk has {} bytes, the content list says {}", data.len(), span.len),
        ));
    }
    Ok(data)
}

/// Reads into `buf` from `offset` of the content, fetching only the chunks
/// that cover the range. Returns the bytes read: fewer than `buf.len()` only
/// at the end of the content, 0 at or past it.
pub fn read_content_at(
    store: &dyn ChunkStore,
    content: &ContentRef,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, StoreError> {
    let mut filled = 0;
    let mut chunk_start = 0u64;
    for span in &content.chunks {
        if filled == buf.len() {
            break;
        }
        let chunk_end = chunk_start + u64::from(span.len);
        let want = offset + filled as u64;
        if chunk_end > want {
            let data = get_span(store, span)?;
            let from = (want - chunk_start) as usize;
            let n = (data.len() - from).min(buf.len() - filled);
            buf[filled..filled + n].copy_from_slice(&data[from..from + n]);
            filled += n;
        }
        chunk_start = chunk_end;
    }
    Ok(filled)
}

/// Writes the whole content to `writer` and checks it against the content
/// hash, so a wrong chunk list is caught even when every chunk is intact.
/// Returns the bytes written.
pub fn read_content_to(
    store: &dyn ChunkStore,
    content: &ContentRef,
    mut writer: impl Write,
) -> Result<u64, StoreError> {
    let mut hasher = blake3::Hasher::new();
    let mut written = 0u64;
    for span in &content.chunks {
        let data = get_span(store, span)?;
        hasher.update(&data);
        writer.write_all(&data).map_err(|e| StoreError::io(format!("writing out content {}", content.hash), e))?;
        written += data.len() as u64;
    }
    let actual = ChunkId::from_bytes(*hasher.finalize().as_bytes());
    if actual != content.hash || written != content.size {
        return Err(StoreError::corrupt(
            content.hash,
            format!("reassembled {written} bytes hashing to {actual}, expected {} bytes", content.size),
        ));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::pseudo_random;
    use crate::store::{MemoryStore, PackStore};

    /// A 1 MiB text file of numbered lines, like source or a log.
    fn text_file() -> Vec<u8> {
        let mut out = Vec::with_capacity(1 << 20);
        let mut i = 0u64;
        while out.len() < 1 << 20 {
            let words = pseudo_random(i, 8);
            out.extend_from_slice(format!("line {i:06}: value {:?} and some text\n", words).as_bytes());
            i += 1;
        }
        out.truncate(1 << 20);
        out
    }

    #[test]
    fn a_content_that_fails_part_way_leaves_the_store_as_it_was() {
        let store = crate::store::FaultyStore::new(MemoryStore::new());
        let known = text_file();
        store_content(&store, &known[..]).expect("store a first content");
        let before = store.stats().expect("stats");
        // Half new bytes, half known: fails after a few puts.
        let mut mixed = pseudo_random(7, 1 << 20);
        mixed.extend_from_slice(&known);
        store.fail_puts_after(5, libc::ENOSPC);
        let err = store_content(&store, &mixed[..]).expect_err("the store refuses");
        assert!(err.to_string().contains("injected"), "{err}");
        assert_eq!(store.stats().expect("stats"), before, "chunks of the failed content stayed");
    }

    #[test]
    fn hundred_one_line_edits_deduplicate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = PackStore::open(dir.path()).expect("open");
        let mut file = text_file();
        let mut total_logical = 0u64;
        for edit in 0..100u64 {
            // Rewrite one line somewhere in the file, changing its length.
            let at = (pseudo_random(edit, 4).iter().fold(0usize, |a, b| a * 256 + *b as usize)) % (file.len() - 200);
            let line_start = file[..at].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let line_end = at + file[at..].iter().position(|&b| b == b'\n').unwrap_or(0);
            let new_line = format!("edited line {edit}: something different here");
            file.splice(line_start..line_end, new_line.bytes());
            let content = store_content(&store, file.as_slice()).expect("store content");
            assert_eq!(content.size, file.len() as u64);
            assert_eq!(content.hash, ChunkId::of(&file));
            total_logical += content.size;
        }
        let stats = store.stats().expect("stats");
        println!(
            "100 one-line edits of a 1 MiB file: {} logical bytes, {} chunks, {} raw bytes stored ({:.2}%), {} after compression ({:.2}%)",
            total_logical,
            stats.chunks,
            stats.raw_bytes,
            100.0 * stats.raw_bytes as f64 / total_logical as f64,
            stats.stored_bytes,
            100.0 * stats.stored_bytes as f64 / total_logical as f64,
        );
        // Deduplication alone (raw bytes, before compression) must do it.
        assert!(stats.raw_bytes < total_logical / 10, "raw {} of {}", stats.raw_bytes, total_logical);
        assert!(stats.stored_bytes < stats.raw_bytes);
    }

    #[test]
    fn random_access_matches_source() {
        let store = MemoryStore::new();
        let data = pseudo_random(7, 700_000);
        let content = store_content(&store, data.as_slice()).expect("store");
        assert!(content.chunks.len() > 5, "expected several chunks, got {}", content.chunks.len());
        assert!(content.chunks.iter().all(|s| s.len <= MAX_CHUNK));
        assert_eq!(content.chunks.iter().map(|s| u64::from(s.len)).sum::<u64>(), data.len() as u64);
        for i in 0..200u64 {
            let r = pseudo_random(1000 + i, 8);
            let offset = u64::from_le_bytes(r[..8].try_into().expect("8 bytes")) % (data.len() as u64 + 100);
            let len = (r[0] as usize * 700) % 150_000;
            let mut buf = vec![0u8; len];
            let n = read_content_at(&store, &content, offset, &mut buf).expect("read_content_at");
            let start = (offset as usize).min(data.len());
            let end = (start + len).min(data.len());
            assert_eq!(n, end - start, "length at offset {offset} len {len}");
            assert_eq!(&buf[..n], &data[start..end], "bytes at offset {offset} len {len}");
        }
        let mut out = Vec::new();
        assert_eq!(read_content_to(&store, &content, &mut out).expect("read_content_to"), data.len() as u64);
        assert_eq!(out, data);
    }

    #[test]
    fn empty_content_has_no_chunks() {
        let store = MemoryStore::new();
        let content = store_content(&store, &b""[..]).expect("store empty");
        assert_eq!(content.size, 0);
        assert!(content.chunks.is_empty());
        assert_eq!(content.hash, ChunkId::of(b""));
        let mut out = Vec::new();
        assert_eq!(read_content_to(&store, &content, &mut out).expect("read"), 0);
        assert_eq!(read_content_at(&store, &content, 0, &mut [0u8; 10]).expect("read_at"), 0);
        let decoded = ContentRef::decode_chunks(&content.encode_chunks()).expect("decode");
        assert!(decoded.is_empty());
    }

    #[test]
    fn wrong_chunk_list_is_caught() {
        let store = MemoryStore::new();
        let content = store_content(&store, pseudo_random(3, 200_000).as_slice()).expect("store");
        let mut swapped = content.clone();
        swapped.chunks.swap(0, 1);
        let result = read_content_to(&store, &swapped, std::io::sink());
        // Either the lengths disagree or the whole hash does; both are Corrupt.
        assert!(matches!(result, Err(StoreError::Corrupt { .. })), "got {result:?}");
    }

    #[test]
    fn chunk_list_roundtrip() {
        let store = MemoryStore::new();
        let content = store_content(&store, pseudo_random(4, 300_000).as_slice()).expect("store");
        let encoded = content.encode_chunks();
        assert!(encoded.len() < content.chunks.len() * 36 + 8, "encoding is not compact: {}", encoded.len());
        assert_eq!(ContentRef::decode_chunks(&encoded).expect("decode"), content.chunks);
        // Lengths that need multi-byte varints.
        let spans = vec![
            ChunkSpan { id: ChunkId::of(b"a"), len: 1 },
            ChunkSpan { id: ChunkId::of(b"b"), len: 128 },
            ChunkSpan { id: ChunkId::of(b"c"), len: u32::MAX },
        ];
        let synthetic = ContentRef { hash: ChunkId::of(b""), size: 0, chunks: spans.clone() };
        assert_eq!(ContentRef::decode_chunks(&synthetic.encode_chunks()).expect("decode"), spans);
    }

    #[test]
    fn decoding_garbage_fails() {
        let store = MemoryStore::new();
        let content = store_content(&store, pseudo_random(5, 100_000).as_slice()).expect("store");
        let good = content.encode_chunks();
        assert!(ContentRef::decode_chunks(&[]).is_err());
        assert!(ContentRef::decode_chunks(&[9, 0]).is_err(), "unknown format accepted");
        assert!(ContentRef::decode_chunks(&good[..good.len() - 1]).is_err(), "truncated accepted");
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(ContentRef::decode_chunks(&trailing).is_err(), "trailing byte accepted");
        let mut huge_count = vec![CHUNK_LIST_FORMAT];
        put_varint(&mut huge_count, u64::MAX);
        assert!(ContentRef::decode_chunks(&huge_count).is_err(), "impossible count accepted");
        let mut zero_len = vec![CHUNK_LIST_FORMAT, 1];
        zero_len.extend_from_slice(&[0u8; 32]);
        zero_len.push(0);
        assert!(ContentRef::decode_chunks(&zero_len).is_err(), "zero-length chunk accepted");
        for seed in 0..200 {
            let noise = pseudo_random(seed, (seed as usize * 7) % 300);
            if let Ok(spans) = ContentRef::decode_chunks(&noise) {
                panic!("random bytes {noise:?} decoded to {spans:?}");
            }
        }
    }
}

//! The gzip container (RFC 1952) around a profile, written without allocating: pprof's files
//! are gzip streams by convention (Go's `runtime/pprof`, jemalloc_pprof, the tools that fetch
//! profiles over HTTP all send them so). The deflate data is in stored blocks (RFC 1951 §3.2.4:
//! the bytes as they are, behind a 5-byte header per block), so the stream needs no window, no
//! tables and no more memory than one block's buffer; every gzip reader takes it, and `gzip -9`
//! compresses it for keeping.

use super::proto::{Chunks, Sink};

/// Bytes per stored block (a block holds at most 65 535).
const BLOCK: usize = 4096;

/// The fixed header: magic, deflate, no flags, no time, no extra flags, Unix.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320), one table entry per byte value.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// Folds `bytes` into a running CRC-32 (`!0` before the first byte, inverted at the end).
fn crc32(mut crc: u32, bytes: &[u8]) -> u32 {
    for &byte in bytes {
        crc = CRC_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// A sink that wraps what it is given in a gzip stream and passes the stream to `inner`;
/// [`Gzip::finish`] writes the last block and the trailer.
pub struct Gzip<S: Sink> {
    inner: S,
    crc: u32,
    /// The input's length modulo 2^32, as the trailer states it.
    size: u32,
    buffer: Chunks<BLOCK>,
}

impl<S: Sink> Gzip<S> {
    pub fn new(mut inner: S) -> Self {
        inner.put(&HEADER);
        Gzip {
            inner,
            crc: !0,
            size: 0,
            buffer: Chunks::new(),
        }
    }

    /// Ends the stream (final block, CRC-32 and length) and returns the inner sink.
    pub fn finish(mut self) -> S {
        stored_block(&mut self.inner, self.buffer.filled(), true);
        let mut trailer = [0u8; 8];
        trailer[..4].copy_from_slice(&(!self.crc).to_le_bytes());
        trailer[4..].copy_from_slice(&self.size.to_le_bytes());
        self.inner.put(&trailer);
        self.inner
    }
}

/// Writes `data` (at most 65 535 bytes) to `sink` as one stored block (the last one when
/// `last`).
fn stored_block(sink: &mut impl Sink, data: &[u8], last: bool) {
    let len = data.len() as u16;
    let mut head = [u8::from(last), 0, 0, 0, 0];
    head[1..3].copy_from_slice(&len.to_le_bytes());
    head[3..5].copy_from_slice(&(!len).to_le_bytes());
    sink.put(&head);
    sink.put(data);
}

impl<S: Sink> Sink for Gzip<S> {
    fn put(&mut self, bytes: &[u8]) {
        self.crc = crc32(self.crc, bytes);
        self.size = self.size.wrapping_add(bytes.len() as u32);
        let inner = &mut self.inner;
        self.buffer.put(bytes, |full| {
            stored_block(inner, full, false);
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[test]
    fn crc32_of_the_check_string() {
        // The CRC-32 catalogue's check value for "123456789".
        assert_eq!(!crc32(!0, b"123456789"), 0xcbf4_3926);
    }

    /// `gzip -d` reads back what went in, for an empty input, one that ends on a block's
    /// boundary and one that spans blocks in uneven pieces, and checks the CRC and length.
    #[test]
    fn gzip_reads_the_stream_back() {
        for len in [0usize, 1, BLOCK, 3 * BLOCK + 17] {
            let input: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut gzip = Gzip::new(Vec::new());
            for piece in input.chunks(1000 + len % 7) {
                gzip.put(piece);
            }
            let stream = gzip.finish();
            let mut child = Command::new("gzip")
                .args(["-d", "-c"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("gzip runs");
            child.stdin.take().unwrap().write_all(&stream).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "gzip -d failed for {len} bytes");
            assert_eq!(out.stdout, input, "{len} bytes");
        }
    }
}

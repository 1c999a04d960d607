//! Just enough of the protocol-buffer wire format to write `profile.proto` (pprof's format)
//! without allocating: varints, packed repeated integers, and length-delimited fields. A
//! nested message is built in a [`Message`] on the stack and then written whole into its
//! parent's sink, so its length is known before its bytes go out.

/// Where encoded bytes go: a file descriptor (through a buffer), or a growable buffer the
/// caller owns.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

/// Wire types.
const VARINT: u64 = 0;
const LEN: u64 = 2;

/// Appends `value` as a varint to `out`, returning the bytes written.
fn varint(mut value: u64, out: &mut [u8; 10]) -> usize {
    let mut n = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out[n] = byte;
            return n + 1;
        }
        out[n] = byte | 0x80;
        n += 1;
    }
}

/// Writes a field's key.
fn key(sink: &mut impl Sink, field: u32, wire: u64) {
    put_varint(sink, (u64::from(field) << 3) | wire);
}

/// Writes a bare varint.
fn put_varint(sink: &mut impl Sink, value: u64) {
    let mut bytes = [0u8; 10];
    let n = varint(value, &mut bytes);
    sink.put(&bytes[..n]);
}

/// Writes an integer field (omitted when zero, as proto3 does).
pub fn uint(sink: &mut impl Sink, field: u32, value: u64) {
    if value != 0 {
        key(sink, field, VARINT);
        put_varint(sink, value);
    }
}

/// Writes a length-delimited field: a string, bytes, or an encoded message.
pub fn bytes(sink: &mut impl Sink, field: u32, value: &[u8]) {
    key(sink, field, LEN);
    put_varint(sink, value.len() as u64);
    sink.put(value);
}

/// Writes a packed repeated integer field (omitted when empty).
pub fn packed(sink: &mut impl Sink, field: u32, values: impl Iterator<Item = u64> + Clone) {
    let mut length = 0;
    let mut scratch = [0u8; 10];
    for value in values.clone() {
        length += varint(value, &mut scratch);
    }
    if length == 0 {
        return;
    }
    key(sink, field, LEN);
    put_varint(sink, length as u64);
    for value in values {
        put_varint(sink, value);
    }
}

/// A nested message being built, in a fixed buffer on the stack. Bytes past its capacity are
/// dropped and the message marked as overflowed (the caller sizes it for its largest message).
pub struct Message<const N: usize> {
    bytes: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> Message<N> {
    pub fn new() -> Self {
        Message {
            bytes: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    /// The encoded message.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// True when something did not fit.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

/// A fixed buffer that collects bytes and hands them on a full buffer at a time: the file
/// sink's writes and the gzip stream's blocks.
pub struct Chunks<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Chunks<N> {
    pub const fn new() -> Self {
        Chunks {
            bytes: [0; N],
            len: 0,
        }
    }

    /// Appends `bytes`, handing the whole buffer to `full` each time it fills (it is empty
    /// again after); when `full` returns false the rest of `bytes` is dropped.
    pub fn put(&mut self, mut bytes: &[u8], mut full: impl FnMut(&[u8]) -> bool) {
        while !bytes.is_empty() {
            if self.len == N {
                if !full(&self.bytes) {
                    return;
                }
                self.len = 0;
            }
            let n = bytes.len().min(N - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
    }

    /// What the buffer holds.
    pub fn filled(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Empties the buffer.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// A growable buffer: `nodalloc::profile::pprof()`'s bytes (allocated outside the allocator's
/// paths) and the tests'.
#[cfg(feature = "std")]
impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl<const N: usize> Sink for Message<N> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end > N {
            self.overflowed = true;
            return;
        }
        self.bytes[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_encode_as_the_wire_format_says() {
        let mut out = Vec::new();
        uint(&mut out, 1, 150);
        uint(&mut out, 2, 0);
        bytes(&mut out, 2, b"testing");
        packed(&mut out, 4, [3u64, 270, 86942].into_iter());
        packed(&mut out, 5, [].into_iter());
        // The examples of the protocol-buffer encoding guide.
        assert_eq!(
            out,
            [
                0x08, 0x96, 0x01, // field 1 = 150
                0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g', // field 2 = "testing"
                0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05, // field 4 = [3, 270, 86942]
            ]
        );
        let mut big = Vec::new();
        uint(&mut big, 1, u64::MAX);
        assert_eq!(big.len(), 1 + 10);
    }

    #[test]
    fn a_message_keeps_what_fits_and_says_when_something_did_not() {
        let mut message = Message::<4>::new();
        bytes(&mut message, 1, b"ab");
        assert_eq!(message.as_bytes(), [0x0a, 0x02, b'a', b'b']);
        assert!(!message.overflowed());
        uint(&mut message, 2, 1);
        assert!(message.overflowed());
        assert_eq!(message.as_bytes().len(), 4);
    }
}

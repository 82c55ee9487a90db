//! Bounds-checked little-endian cursor over a GGUF header: every read either
//! succeeds inside the buffer or returns a "truncated" reason, never panics.
//! Value type ids follow `gguf_type` in ggml's gguf.h.

use super::MetaValue;

/// Deepest nesting of metadata arrays accepted (real files use 1).
pub const DEFAULT_MAX_ARRAY_DEPTH: usize = 4;

/// A reason string; the caller wraps it with the file path.
pub type ReadResult<T> = std::result::Result<T, String>;

/// A forward-only reader over the mapped file.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Byte offset of the next read.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &str) -> ReadResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(format!("{what} at byte {} needs {n} bytes but only {} remain (truncated file?)", self.pos, self.remaining()));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> ReadResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &str) -> ReadResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> ReadResult<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> ReadResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> ReadResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that must fit in the rest of the file at `min_size` bytes per item.
    pub fn count(&mut self, min_size: usize, what: &str) -> ReadResult<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let limit = (self.remaining() / min_size.max(1)) as u64;
        if n > limit {
            return Err(format!("{what} at byte {at} is {n}, more than the {} remaining bytes can hold", self.remaining()));
        }
        Ok(n as usize)
    }

    /// A GGUF string: u64 length then UTF-8 bytes.
    pub fn string(&mut self, what: &str) -> ReadResult<String> {
        let len = self.count(1, what)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} at byte {at} is not valid UTF-8"))
    }

    /// One metadata value of type id `ty`.
    pub fn value(&mut self, ty: u32, depth: usize, what: &str) -> ReadResult<MetaValue> {
        Ok(match ty {
            0 => MetaValue::U8(self.u8(what)?),
            1 => MetaValue::I8(self.u8(what)? as i8),
            2 => MetaValue::U16(self.u16(what)?),
            3 => MetaValue::I16(self.u16(what)? as i16),
            4 => MetaValue::U32(self.u32(what)?),
            5 => MetaValue::I32(self.u32(what)? as i32),
            6 => MetaValue::F32(f32::from_bits(self.u32(what)?)),
            7 => match self.u8(what)? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => return Err(format!("{what}: bool value {b} is neither 0 nor 1")),
            },
            8 => MetaValue::String(self.string(what)?),
            9 => {
                if depth >= DEFAULT_MAX_ARRAY_DEPTH {
                    return Err(format!("{what}: arrays nested deeper than {DEFAULT_MAX_ARRAY_DEPTH}"));
                }
                let elem = self.u32(what)?;
                let n = self.count(min_value_size(elem), what)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1, what)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64(what)?),
            11 => MetaValue::I64(self.u64(what)? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64(what)?)),
            other => return Err(format!("{what}: unknown metadata value type {other}")),
        })
    }
}

/// Smallest encoding of one value of type `ty`, to bound array counts before allocating.
fn min_value_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10 | 11 | 12 => 8,
        9 => 12,
        _ => 1,
    }
}

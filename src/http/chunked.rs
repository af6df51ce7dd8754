//! Incremental boundary tracker for `Transfer-Encoding: chunked` bodies (RFC 9112 §7.1).
//!
//! The engine forwards chunked bodies verbatim; this only finds where the message ends and
//! rejects framing that another implementation could read differently. Request bodies are
//! held to CRLF line endings ([`ChunkedState::for_request`]): a bare LF in chunk framing is
//! what request-smuggling attacks feed to a chain whose next hop ends lines only at CRLF,
//! and since the bytes go on unchanged, the next hop must see what sluice saw.

use super::HttpError;
use super::util::is_tchar;

/// Longest accepted chunk-size line (size + extensions) or trailer line, without its EOL.
pub const MAX_CHUNK_LINE: u32 = 4096;

/// Most hex digits accepted in a chunk size (leading zeros included): 16 digits = 64 bits.
const MAX_SIZE_DIGITS: u8 = 16;

const fn err(reason: &'static str) -> HttpError {
    HttpError {
        status: 400,
        reason,
    }
}

const E_SIZE: HttpError = err("invalid chunk size");
const E_SIZE_TOO_LARGE: HttpError = err("chunk size too large");
const E_EXT: HttpError = err("invalid chunk extension");
const E_LINE_TOO_LONG: HttpError = err("chunk line too long");
const E_BARE_CR: HttpError = err("bare CR in chunked framing");
const E_BARE_LF: HttpError = err("bare LF in chunked framing");
const E_DATA_EOL: HttpError = err("missing CRLF after chunk data");
const E_TRAILER: HttpError = err("invalid trailer field");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Start of a chunk-size line: a hex digit is required.
    SizeStart,
    /// Inside the hex digits.
    Size,
    /// Whitespace after the digits (before `;` or the EOL).
    SizeWs,
    /// Inside chunk extensions, up to the EOL.
    Ext,
    /// Saw CR at the end of the chunk-size line.
    SizeLf,
    /// Inside chunk data (`remaining` > 0).
    Data,
    /// After chunk data: CR or LF required.
    DataCr,
    /// Saw CR after chunk data.
    DataLf,
    /// Start of a trailer line, or the final empty line.
    TrailerStart,
    TrailerName,
    TrailerValue,
    /// Saw CR at the end of a trailer line.
    TrailerLf,
    /// Saw CR on the final empty line.
    FinalLf,
    Done,
}

/// Tracks the end of a chunked message body fed in arbitrary pieces.
#[derive(Debug, Clone)]
pub struct ChunkedState {
    st: St,
    /// Chunk size being parsed, then bytes of chunk data still expected.
    remaining: u64,
    digits: u8,
    /// Length of the current chunk-size or trailer line so far.
    line_len: u32,
    /// Sum of the chunk sizes seen so far (the decoded payload length).
    payload: u64,
    error: Option<HttpError>,
    /// Lines must end with CRLF (request bodies); else a bare LF ends a line too.
    crlf_only: bool,
}

impl Default for ChunkedState {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedState {
    pub fn new() -> Self {
        ChunkedState {
            st: St::SizeStart,
            remaining: 0,
            digits: 0,
            line_len: 0,
            payload: 0,
            error: None,
            crlf_only: false,
        }
    }

    /// A tracker for a request body: as [`ChunkedState::new`], but a line of the chunked
    /// framing that ends with a bare LF is an error (400).
    pub fn for_request() -> Self {
        ChunkedState {
            crlf_only: true,
            ..Self::new()
        }
    }

    /// A bare LF ending a line: accepted unless CRLF is required.
    #[inline]
    fn bare_lf(&self) -> Result<(), HttpError> {
        if self.crlf_only {
            Err(E_BARE_LF)
        } else {
            Ok(())
        }
    }

    /// `true` once the whole message (last chunk, trailers, final EOL) has been consumed.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.st == St::Done
    }

    /// Decoded payload bytes announced so far (sum of chunk sizes, including the chunk being
    /// received); lets the engine enforce a body size limit.
    #[inline]
    pub fn payload_len(&self) -> u64 {
        self.payload
    }

    /// Consumes the next bytes of the body. Returns how many bytes of `data` belong to this
    /// message (always all of them unless the message ended inside `data`) and whether the
    /// message is complete. Bytes after the end are not consumed (pipelining). After an error,
    /// every call returns the same error; after the end, every call returns `(0, true)`.
    ///
    /// Errors have status 400 (the engine maps them to 502 for responses).
    pub fn feed(&mut self, data: &[u8]) -> Result<(usize, bool), HttpError> {
        self.feed_with(data, |_| {})
    }

    /// [`feed`](Self::feed), calling `on_data` with each span of chunk data (the decoded
    /// payload) as it is passed: what response compression reads.
    pub fn feed_with(
        &mut self,
        data: &[u8],
        on_data: impl FnMut(&[u8]),
    ) -> Result<(usize, bool), HttpError> {
        self.feed_parts(data, on_data, |_| {})
    }

    /// [`feed_with`](Self::feed_with), also calling `on_trailer` with the bytes of each trailer
    /// field line (name, value and CRLF; a bare LF is passed as CRLF), so that a re-framed
    /// body can carry them on.
    pub fn feed_parts(
        &mut self,
        data: &[u8],
        mut on_data: impl FnMut(&[u8]),
        mut on_trailer: impl FnMut(&[u8]),
    ) -> Result<(usize, bool), HttpError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut i = 0;
        while i < data.len() {
            match self.st {
                St::Done => break,
                St::Data => {
                    // Fast path: skip chunk data in bulk.
                    let avail = (data.len() - i) as u64;
                    let n = self.remaining.min(avail);
                    on_data(&data[i..i + n as usize]);
                    i += n as usize;
                    self.remaining -= n;
                    if self.remaining == 0 {
                        self.st = St::DataCr;
                    }
                }
                _ => {
                    let b = data[i];
                    i += 1;
                    let before = self.st;
                    if let Err(e) = self.step(b) {
                        self.error = Some(e);
                        return Err(e);
                    }
                    match before {
                        St::TrailerValue if b == b'\n' => on_trailer(b"\r\n"),
                        St::TrailerName | St::TrailerValue | St::TrailerLf => on_trailer(&[b]),
                        St::TrailerStart if self.st == St::TrailerName => on_trailer(&[b]),
                        _ => {}
                    }
                }
            }
        }
        Ok((i, self.st == St::Done))
    }

    /// Counts one byte of a chunk-size or trailer line against [`MAX_CHUNK_LINE`].
    #[inline]
    fn count_line_byte(&mut self) -> Result<(), HttpError> {
        self.line_len += 1;
        if self.line_len > MAX_CHUNK_LINE {
            Err(E_LINE_TOO_LONG)
        } else {
            Ok(())
        }
    }

    /// End of a chunk-size line: start the chunk data, or the trailer section for the last chunk.
    #[inline]
    fn end_size_line(&mut self) {
        self.line_len = 0;
        self.digits = 0;
        if self.remaining == 0 {
            self.st = St::TrailerStart;
        } else {
            self.payload = self.payload.saturating_add(self.remaining);
            self.st = St::Data;
        }
    }

    #[inline]
    fn end_trailer_line(&mut self) {
        self.line_len = 0;
        self.st = St::TrailerStart;
    }

    fn step(&mut self, b: u8) -> Result<(), HttpError> {
        match self.st {
            St::SizeStart => {
                self.count_line_byte()?;
                let v = hex_value(b).ok_or(E_SIZE)?;
                self.remaining = u64::from(v);
                self.digits = 1;
                self.st = St::Size;
            }
            St::Size => match b {
                b'\r' => self.st = St::SizeLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.end_size_line();
                }
                _ => {
                    self.count_line_byte()?;
                    if let Some(v) = hex_value(b) {
                        self.digits += 1;
                        if self.digits > MAX_SIZE_DIGITS {
                            return Err(E_SIZE_TOO_LARGE);
                        }
                        self.remaining = (self.remaining << 4) | u64::from(v);
                    } else {
                        match b {
                            b' ' | b'\t' => self.st = St::SizeWs,
                            b';' => self.st = St::Ext,
                            _ => return Err(E_SIZE),
                        }
                    }
                }
            },
            St::SizeWs => match b {
                b'\r' => self.st = St::SizeLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.end_size_line();
                }
                b' ' | b'\t' => self.count_line_byte()?,
                b';' => {
                    self.count_line_byte()?;
                    self.st = St::Ext;
                }
                _ => return Err(E_SIZE),
            },
            St::Ext => match b {
                b'\r' => self.st = St::SizeLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.end_size_line();
                }
                b'\t' | 0x20..=0x7e | 0x80..=0xff => self.count_line_byte()?,
                _ => return Err(E_EXT),
            },
            St::SizeLf => {
                if b != b'\n' {
                    return Err(E_BARE_CR);
                }
                self.end_size_line();
            }
            St::DataCr => match b {
                b'\r' => self.st = St::DataLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.st = St::SizeStart;
                }
                _ => return Err(E_DATA_EOL),
            },
            St::DataLf => {
                if b != b'\n' {
                    return Err(E_DATA_EOL);
                }
                self.st = St::SizeStart;
            }
            St::TrailerStart => match b {
                b'\r' => self.st = St::FinalLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.st = St::Done;
                }
                _ if is_tchar(b) => {
                    self.count_line_byte()?;
                    self.st = St::TrailerName;
                }
                // Includes SP/HTAB: obs-fold is not accepted in trailers either.
                _ => return Err(E_TRAILER),
            },
            St::TrailerName => {
                self.count_line_byte()?;
                match b {
                    b':' => self.st = St::TrailerValue,
                    _ if is_tchar(b) => {}
                    _ => return Err(E_TRAILER),
                }
            }
            St::TrailerValue => match b {
                b'\r' => self.st = St::TrailerLf,
                b'\n' => {
                    self.bare_lf()?;
                    self.end_trailer_line();
                }
                b'\t' | 0x20..=0x7e | 0x80..=0xff => self.count_line_byte()?,
                _ => return Err(E_TRAILER),
            },
            St::TrailerLf => {
                if b != b'\n' {
                    return Err(E_BARE_CR);
                }
                self.end_trailer_line();
            }
            St::FinalLf => {
                if b != b'\n' {
                    return Err(E_BARE_CR);
                }
                self.st = St::Done;
            }
            // Data is skipped in bulk by `feed`; Done consumes nothing.
            St::Data | St::Done => {}
        }
        Ok(())
    }
}

#[inline]
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

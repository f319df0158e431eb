//! The session settings that move where PostgreSQL's scanner ends a literal or a word:
//! `standard_conforming_strings`, and the client encoding the text is written in.

/// How a session's text is read: what the lexer must know of the session to end each
/// literal and word where PostgreSQL does. Follow a client's `ParameterStatus` messages
/// with [`Scan::observe`] and lex its next text with the result; the default is
/// [`Scan::STANDARD`].
///
/// - `standard_conforming_strings = off`: a plain `'...'` (and `N'...'`) literal takes a
///   backslash as an escape, so `'a\';'` is one literal (scan.l `xqstart` begins `xe`).
/// - A client encoding whose two-byte characters may end in an ASCII byte (`SJIS`, `BIG5`,
///   `GBK`, `UHC`, `GB18030`, `JOHAB`, PostgreSQL's client-only encodings): PostgreSQL
///   scans the text after converting it to the server's encoding, where such a byte is part
///   of its character; read byte by byte, `ソ` in SJIS (`0x83 0x5C`) ends in a backslash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scan {
    standard_strings: bool,
    encoding: Encoding,
}

/// How many bytes a character takes in the client encoding (PostgreSQL's `pg_*_mblen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Encoding {
    /// Every byte of a multi-byte character is >= 0x80 (UTF8, LATIN*, EUC_*, ...).
    AsciiSafe,
    /// SJIS, SHIFT_JIS_2004: 0xA1..=0xDF is one byte, another high byte starts two.
    Sjis,
    /// BIG5, GBK, UHC: a high byte starts two.
    Double,
    /// JOHAB (`pg_euc_mblen`): 0x8F starts three, another high byte two.
    Johab,
    /// GB18030: a high byte starts four when a digit follows it, else two.
    Gb18030,
}

impl Default for Scan {
    fn default() -> Self {
        Scan::STANDARD
    }
}

impl Scan {
    /// PostgreSQL's defaults: `standard_conforming_strings` on, an ASCII-safe encoding.
    pub const STANDARD: Scan = Scan {
        standard_strings: true,
        encoding: Encoding::AsciiSafe,
    };

    /// This reading with `standard_conforming_strings` `on` (true) or `off`.
    pub const fn standard_strings(self, on: bool) -> Scan {
        Scan {
            standard_strings: on,
            ..self
        }
    }

    /// This reading with the client encoding named `name` (as `client_encoding` reports it,
    /// `SJIS`; PostgreSQL's aliases, `Shift_JIS`, `WIN932`, in any case, are known too).
    pub fn client_encoding(self, name: &[u8]) -> Scan {
        Scan {
            encoding: Encoding::named(name),
            ..self
        }
    }

    /// Follows one `ParameterStatus` (or startup parameter) `name` = `value`: the two that
    /// change the reading update it, any other is ignored. Whether the reading changed.
    pub fn observe(&mut self, name: &[u8], value: &[u8]) -> bool {
        let before = *self;
        if name.eq_ignore_ascii_case(b"standard_conforming_strings") {
            *self = self.standard_strings(!means_false(value));
        } else if name.eq_ignore_ascii_case(b"client_encoding") {
            *self = self.client_encoding(value);
        }
        *self != before
    }

    /// Whether a plain `'...'` literal is standard (no backslash escapes).
    pub fn is_standard_strings(&self) -> bool {
        self.standard_strings
    }

    /// The body a plain `'...'` literal has under this reading.
    pub(super) fn plain(&self) -> super::ends::Body {
        if self.standard_strings {
            super::ends::Body::Standard
        } else {
            super::ends::Body::Escape
        }
    }

    /// Whether every byte below 0x80 is a character of its own.
    pub(super) fn ascii_safe(&self) -> bool {
        self.encoding == Encoding::AsciiSafe
    }

    /// The length of the character at `i` (0 at the end, never past the end).
    pub(super) fn char_len(&self, sql: &[u8], i: usize) -> usize {
        let Some(&b) = sql.get(i) else {
            return 0;
        };
        if b < 0x80 {
            return 1;
        }
        let len = match self.encoding {
            Encoding::AsciiSafe => 1,
            Encoding::Sjis if (0xa1..=0xdf).contains(&b) => 1,
            Encoding::Sjis | Encoding::Double => 2,
            Encoding::Johab if b == 0x8f => 3,
            Encoding::Johab => 2,
            Encoding::Gb18030 if sql.get(i + 1).is_some_and(u8::is_ascii_digit) => 4,
            Encoding::Gb18030 => 2,
        };
        len.min(sql.len() - i)
    }
}

/// Whether a boolean setting's value is false as PostgreSQL's `parse_bool` reads it
/// (`ParameterStatus` says `off`; a startup parameter may say `false`, `no`, `0`, or a
/// prefix of `false`, or `of`).
fn means_false(value: &[u8]) -> bool {
    let v = value.trim_ascii();
    let prefix_of = |word: &[u8], min: usize| {
        v.len() >= min && v.len() <= word.len() && word[..v.len()].eq_ignore_ascii_case(v)
    };
    prefix_of(b"false", 1) || prefix_of(b"no", 1) || prefix_of(b"off", 2) || v == b"0"
}

impl Encoding {
    /// The encoding PostgreSQL's `pg_char_to_encoding` finds for `name` (compared on its
    /// letters and digits only, in any case), as far as its characters' lengths go.
    fn named(name: &[u8]) -> Encoding {
        let mut key = [0u8; 16];
        let mut n = 0;
        for &b in name.iter().filter(|b| b.is_ascii_alphanumeric()) {
            let Some(slot) = key.get_mut(n) else {
                return Encoding::AsciiSafe;
            };
            *slot = b.to_ascii_lowercase();
            n += 1;
        }
        match &key[..n] {
            b"sjis" | b"shiftjis" | b"mskanji" | b"win932" | b"windows932" | b"shiftjis2004" => {
                Encoding::Sjis
            }
            b"big5" | b"win950" | b"windows950" | b"gbk" | b"win936" | b"windows936" | b"uhc"
            | b"win949" | b"windows949" => Encoding::Double,
            b"johab" => Encoding::Johab,
            b"gb18030" => Encoding::Gb18030,
            _ => Encoding::AsciiSafe,
        }
    }
}

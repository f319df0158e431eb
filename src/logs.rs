//! What reaches the logs from clients: text a client chose, escaped so that it cannot end a
//! line or begin a forged one ([`Escaped`], with [`OneLine`] under tracing's writer as the
//! backstop), and the rate limit of lines a flood of clients could multiply ([`LogLimit`]).

use std::fmt::{self, Display, Write as _};
use std::io;
use std::sync::Mutex;
use std::time::Instant;

/// The longest client-chosen name a line shows, in characters; a longer one ends in `...`.
pub const NAME_MAX: usize = 64;

/// `value`'s text as a log line or an event line may show it: C0 controls, DEL, C1 controls,
/// the Unicode line and paragraph separators and the backslash are written as visible escapes
/// (`\n`, `\r`, `\t`, `\\`, `\x1b`, `\u{85}`), so no value ends a line or starts another and
/// every escape reads one way back; other UTF-8 passes through unchanged. Writes straight to
/// the formatter: no allocation.
#[derive(Clone, Copy)]
pub struct Escaped<T> {
    value: T,
    max_chars: usize,
}

impl<T: Display> Escaped<T> {
    /// All of `value`, escaped: for a text that may quote a name (an error message).
    pub fn new(value: T) -> Self {
        Escaped {
            value,
            max_chars: usize::MAX,
        }
    }

    /// At most [`NAME_MAX`] characters of `value`, escaped, then `...`: for a name (user,
    /// database, application_name, statement).
    pub fn name(value: T) -> Self {
        Escaped {
            value,
            max_chars: NAME_MAX,
        }
    }
}

impl<T: Display> Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = EscapeWriter {
            out: f,
            left: self.max_chars,
            cut: false,
        };
        write!(w, "{}", self.value)?;
        if w.cut {
            f.write_str("...")?;
        }
        Ok(())
    }
}

impl<T: Display> fmt::Debug for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(self, f)
    }
}

/// Whether [`Escaped`] writes `c` as an escape.
fn needs_escape(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\\' | '\x7f'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

/// The escape of a character [`needs_escape`] names (and of a C0 control for [`OneLine`]).
fn write_escape(out: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        '\\' => out.write_str("\\\\"),
        c if c.is_ascii() => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    }
}

/// Escapes what passes through it into `out`, up to `left` characters.
struct EscapeWriter<'a, W> {
    out: &'a mut W,
    left: usize,
    /// Characters were left out.
    cut: bool,
}

impl<W: fmt::Write> fmt::Write for EscapeWriter<'_, W> {
    fn write_str(&mut self, mut s: &str) -> fmt::Result {
        while !s.is_empty() {
            // The longest run that needs no escape, as one write: all of `s` as a rule.
            let (mut end, mut n) = (0, 0);
            for (i, c) in s.char_indices() {
                if n == self.left || needs_escape(c) {
                    break;
                }
                (end, n) = (i + c.len_utf8(), n + 1);
            }
            self.out.write_str(&s[..end])?;
            self.left -= n;
            s = &s[end..];
            let Some(c) = s.chars().next() else {
                break;
            };
            if self.left == 0 {
                self.cut = true;
                break;
            }
            write_escape(self.out, c)?;
            self.left -= 1;
            s = &s[c.len_utf8()..];
        }
        Ok(())
    }
}

/// tracing's writer, the backstop under [`Escaped`]: each event comes to it whole, in one
/// write ending in its newline, and a C0 control inside it (a newline, a CR) is written as an
/// escape, so an event is one line whatever a field holds. ESC passes when `ansi` (colours
/// on a terminal). JSON lines hold no raw control character, so they pass unchanged.
pub struct OneLine<M> {
    inner: M,
    ansi: bool,
}

impl<M> OneLine<M> {
    pub fn new(inner: M, ansi: bool) -> Self {
        OneLine { inner, ansi }
    }
}

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for OneLine<M>
{
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter {
            inner: self.inner.make_writer(),
            ansi: self.ansi,
        }
    }
}

/// The writer [`OneLine`] makes for one event.
pub struct OneLineWriter<W> {
    inner: W,
    ansi: bool,
}

impl<W: io::Write> io::Write for OneLineWriter<W> {
    /// Takes all of `buf` (so `write_all` hands over an event in one call) and writes it in
    /// one write: escaped if it must be.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match one_line(buf, self.ansi) {
            None => self.inner.write_all(buf)?,
            Some(line) => self.inner.write_all(line.as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `buf` (one event, ending in a newline) with the C0 controls inside it escaped; `None` if
/// it has none, the rule.
fn one_line(buf: &[u8], ansi: bool) -> Option<String> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let breaks = |b: u8| b < 0x20 && !(ansi && b == 0x1b);
    if !body.iter().any(|&b| breaks(b)) {
        return None;
    }
    let text = String::from_utf8_lossy(body);
    let mut line = String::with_capacity(buf.len() + 16);
    for c in text.chars() {
        match u8::try_from(c) {
            Ok(b) if breaks(b) => {
                let _ = write_escape(&mut line, c);
            }
            _ => line.push(c),
        }
    }
    if body.len() < buf.len() {
        line.push('\n');
    }
    Some(line)
}

/// Lines of one kind (`what`) that a flood could multiply: a token bucket lets `burst` go at
/// once and `per_second` a second after that. The rest are counted; the count goes out with
/// the next line let through (its `earlier_not_logged`) or in [`LogLimit::flush`]'s summary,
/// whichever comes first, so every line held back is counted exactly once.
#[derive(Debug)]
pub struct LogLimit {
    what: &'static str,
    per_second: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    held_back: u64,
}

/// Refusal lines (logins, admin requests, server logins) a second after a burst.
pub const REFUSALS_PER_SECOND: u32 = 10;
/// Refusal lines let through at once.
pub const REFUSALS_BURST: u32 = 20;

impl LogLimit {
    /// The limit of refusal lines: [`REFUSALS_BURST`] at once, [`REFUSALS_PER_SECOND`] after.
    pub fn refusals(what: &'static str) -> LogLimit {
        LogLimit::new(what, REFUSALS_PER_SECOND, REFUSALS_BURST)
    }

    pub fn new(what: &'static str, per_second: u32, burst: u32) -> LogLimit {
        LogLimit {
            what,
            per_second: f64::from(per_second),
            burst: f64::from(burst),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                at: Instant::now(),
                held_back: 0,
            }),
        }
    }

    /// `Some(lines held back since the last count went out)` if a line may go out now.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.at = b.at.max(now);
        b.tokens = (b.tokens + elapsed * self.per_second).min(self.burst);
        if b.tokens < 1.0 {
            b.held_back += 1;
            return None;
        }
        b.tokens -= 1.0;
        Some(std::mem::take(&mut b.held_back))
    }

    /// Lines held back since the last count went out, now counted as gone out.
    fn take_held_back(&self) -> u64 {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut b.held_back)
    }

    /// Logs how many lines were held back since the last count went out, if any: called
    /// once a second, so a flood that stops is still counted.
    pub fn flush(&self) {
        let suppressed = self.take_held_back();
        if suppressed > 0 {
            tracing::info!(
                lines = self.what,
                suppressed,
                "log lines held back by their rate limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn esc(s: &str) -> String {
        Escaped::new(s).to_string()
    }

    #[test]
    fn each_control_character_is_escaped() {
        assert_eq!(esc("a\nb"), "a\\nb");
        assert_eq!(esc("a\rb"), "a\\rb");
        assert_eq!(esc("a\tb"), "a\\tb");
        assert_eq!(esc("a\\nb"), "a\\\\nb", "a backslash reads one way back");
        assert_eq!(esc("\x1b[31m"), "\\x1b[31m");
        assert_eq!(
            esc("\0\x07\x08\x0b\x0c\x7f"),
            "\\x00\\x07\\x08\\x0b\\x0c\\x7f"
        );
        assert_eq!(esc("\u{85}\u{9b}"), "\\u{85}\\u{9b}");
        assert_eq!(esc("\u{2028}\u{2029}"), "\\u{2028}\\u{2029}");
        for b in 0u8..0x20 {
            let s = esc(&format!("x{}y", b as char));
            assert!(
                s.starts_with("x\\") && s.ends_with('y') && !s.chars().any(char::is_control),
                "{b:#x}: {s:?}"
            );
        }
    }

    #[test]
    fn other_text_passes_unchanged() {
        for s in [
            "",
            "plain",
            "pgbench",
            "naïve Ünïcödé",
            "日本語",
            "emoji 🐘",
            "a\"b'c",
        ] {
            assert_eq!(esc(s), s);
        }
    }

    #[test]
    fn a_forged_line_stays_inside_its_own() {
        let forged = "db\r\n[POOL] client 9 connected";
        let line = format!("refused {}", Escaped::name(forged));
        assert_eq!(line.lines().count(), 1);
        assert_eq!(line, "refused db\\r\\n[POOL] client 9 connected");
    }

    #[test]
    fn names_are_cut_at_the_limit_and_texts_are_not() {
        let long = "é".repeat(500);
        let name = Escaped::name(&long).to_string();
        assert_eq!(name, format!("{}...", "é".repeat(NAME_MAX)));
        assert_eq!(Escaped::name("x".repeat(NAME_MAX)).to_string().len(), 64);
        assert_eq!(esc(&long), long);
        // An escape counts as one character.
        let name = Escaped::name("\n".repeat(100)).to_string();
        assert_eq!(name, format!("{}...", "\\n".repeat(NAME_MAX)));
    }

    #[test]
    fn any_display_value_is_escaped() {
        let e = std::io::Error::other("role \"x\r\n[POOL] forged\" does not exist");
        assert_eq!(
            Escaped::new(&e).to_string(),
            "role \"x\\r\\n[POOL] forged\" does not exist"
        );
        assert_eq!(format!("{:?}", Escaped::new("a\nb")), "a\\nb");
    }

    #[test]
    fn an_event_stays_one_line_under_the_writer() {
        assert_eq!(one_line(b"plain line\n", false), None);
        assert_eq!(
            one_line(b"x pool=db\r\n[POOL] forged\n", false).as_deref(),
            Some("x pool=db\\r\\n[POOL] forged\n")
        );
        assert_eq!(one_line(b"\x1b[1mbold\x1b[0m\n", true), None);
        assert_eq!(one_line(b"\x1b[1m\n", false).as_deref(), Some("\\x1b[1m\n"));
        let mut w = OneLineWriter {
            inner: Vec::new(),
            ansi: false,
        };
        io::Write::write_all(&mut w, "a\nb é\n".as_bytes()).unwrap();
        assert_eq!(String::from_utf8(w.inner).unwrap(), "a\\nb é\n");
    }

    #[test]
    fn a_burst_passes_then_the_rate_and_every_held_line_is_counted_once() {
        let l = LogLimit::new("test", 10, 20);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let passed = (0..25).filter(|_| l.admit_at(t0).is_some()).count();
        assert_eq!(passed, 20, "the burst");
        assert_eq!(l.admit_at(at(50)), None, "half a token");
        assert_eq!(
            l.admit_at(at(100)),
            Some(6),
            "the next line carries the count"
        );
        assert_eq!(l.admit_at(at(100)), None);
        assert_eq!(l.take_held_back(), 1, "or the summary does");
        assert_eq!(l.take_held_back(), 0);
        assert_eq!(l.admit_at(at(200)), Some(0));
        // Idle time refills up to the burst, no further.
        let passed = (0..50).filter(|_| l.admit_at(at(60_000)).is_some()).count();
        assert_eq!(passed, 20);
        assert_eq!(l.take_held_back(), 30);
        // A clock that goes back refills nothing.
        assert_eq!(l.admit_at(at(10)), None);
    }
}

//! What a console command answers: rows, a command tag or an error, and their text form for
//! `POST /console`, every value escaped so a client's choice of name cannot forge a row.

/// What a console command answers, for the console's protocol or the admin HTTP server.
pub enum Answer {
    Table(&'static [&'static str], Vec<Vec<String>>),
    Done(&'static str),
    Error(&'static str, String),
}

impl Answer {
    /// The answer as text: a header and tab-separated rows (each value escaped, so a name
    /// holding a tab or a newline cannot forge a column or a row), the tag, or `ERROR
    /// code: ...`.
    pub fn to_text(&self) -> String {
        match self {
            Answer::Table(cols, rows) => {
                let mut out = cols.join("\t") + "\n";
                for r in rows {
                    for (i, v) in r.iter().enumerate() {
                        if i > 0 {
                            out.push('\t');
                        }
                        out.push_str(&escape(v));
                    }
                    out.push('\n');
                }
                out
            }
            Answer::Done(tag) => format!("{tag}\n"),
            Answer::Error(code, m) => format!("ERROR {code}: {m}\n"),
        }
    }
}

/// A console value as COPY's text format writes it: backslash, tab, newline and carriage
/// return as `\\`, `\t`, `\n`, `\r`, other control characters as `\xNN`. Names are the
/// clients' choice; escaped, one cannot pass for a row or column of its own in the text
/// answer, nor in psql's unaligned output of the SQL console.
pub fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.chars().any(|c| c == '\\' || c.is_control()) {
        return std::borrow::Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

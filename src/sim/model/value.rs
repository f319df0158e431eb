//! Values, their types and result columns: the few PostgreSQL types the model's statements
//! produce (with their `pg_type` OIDs and lengths) and their text and binary forms.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::{PgError, INVALID_TEXT_REPRESENTATION, NUMERIC_VALUE_OUT_OF_RANGE};

/// A column or parameter type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Bool,
    Int4,
    Int8,
    Text,
    Void,
}

impl Ty {
    /// The type's OID in `pg_type`.
    pub fn oid(self) -> u32 {
        match self {
            Ty::Bool => 16,
            Ty::Int8 => 20,
            Ty::Int4 => 23,
            Ty::Text => 25,
            Ty::Void => 2278,
        }
    }

    /// `typlen`: the fixed size, or -1 for a variable-length type.
    pub fn len(self) -> i16 {
        match self {
            Ty::Bool => 1,
            Ty::Int4 | Ty::Void => 4,
            Ty::Int8 => 8,
            Ty::Text => -1,
        }
    }

    pub fn from_oid(oid: u32) -> Option<Ty> {
        [Ty::Bool, Ty::Int4, Ty::Int8, Ty::Text, Ty::Void]
            .into_iter()
            .find(|t| t.oid() == oid)
    }

    /// The type's name as a cast names it (`$1::int` is `int4`): also the result column's
    /// name for a bare cast.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int4 => "int4",
            Ty::Int8 => "int8",
            Ty::Text => "text",
            Ty::Void => "void",
        }
    }

    /// Converts a parameter or literal given as text, as the type's input function does.
    pub fn input(self, text: &[u8]) -> Result<Value, PgError> {
        match self {
            Ty::Int4 => parse_int4(text).map(Value::Int4),
            Ty::Int8 => parse_int(text, i64::MIN, i64::MAX, "bigint").map(Value::Int8),
            Ty::Text => Ok(Value::Text(Bytes::copy_from_slice(text))),
            Ty::Bool => match text {
                b"t" | b"true" => Ok(Value::Bool(true)),
                b"f" | b"false" => Ok(Value::Bool(false)),
                _ => Err(bad_input("boolean", text)),
            },
            Ty::Void => Ok(Value::Void),
        }
    }
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    Int4(i32),
    Int8(i64),
    Text(Bytes),
    /// The result of a function returning `void`: sent as an empty string.
    Void,
}

impl Value {
    /// Appends the value's length and bytes to a DataRow body, in text (`binary` false) or
    /// binary form (protocol docs, "DataRow").
    pub fn put(&self, buf: &mut BytesMut, binary: bool) {
        match (self, binary) {
            (Value::Null, _) => buf.put_i32(-1),
            (Value::Text(t), _) => {
                buf.put_i32(t.len() as i32);
                buf.put_slice(t);
            }
            (Value::Void, _) => buf.put_i32(0),
            (Value::Bool(b), false) => put_text(buf, if *b { "t" } else { "f" }),
            (Value::Bool(b), true) => {
                buf.put_i32(1);
                buf.put_u8(u8::from(*b));
            }
            (Value::Int4(n), false) => put_text(buf, &n.to_string()),
            (Value::Int4(n), true) => {
                buf.put_i32(4);
                buf.put_i32(*n);
            }
            (Value::Int8(n), false) => put_text(buf, &n.to_string()),
            (Value::Int8(n), true) => {
                buf.put_i32(8);
                buf.put_i64(*n);
            }
        }
    }
}

fn put_text(buf: &mut BytesMut, s: &str) {
    buf.put_i32(s.len() as i32);
    buf.put_slice(s.as_bytes());
}

/// A result column as RowDescription describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: Ty,
    /// The table the column comes from (0 for a computed column) and its attribute number.
    pub table_oid: u32,
    pub attnum: i16,
}

impl Column {
    /// A computed column (no table).
    pub fn computed(name: impl Into<String>, ty: Ty) -> Column {
        Column {
            name: name.into(),
            ty,
            table_oid: 0,
            attnum: 0,
        }
    }
}

/// `int4in`: optional surrounding spaces and sign, decimal digits (PostgreSQL 15).
pub fn parse_int4(text: &[u8]) -> Result<i32, PgError> {
    parse_int(text, i64::from(i32::MIN), i64::from(i32::MAX), "integer")
        .map(|n| i32::try_from(n).expect("range checked by parse_int"))
}

fn parse_int(text: &[u8], min: i64, max: i64, ty: &str) -> Result<i64, PgError> {
    let trimmed = text.trim_ascii();
    let (negative, digits) = match trimmed {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, trimmed),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad_input(ty, text));
    }
    let mut n: i128 = 0;
    for d in digits {
        n = n * 10 + i128::from(d - b'0');
        if n > i128::from(i64::MAX) + 1 {
            break;
        }
    }
    let n = if negative { -n } else { n };
    match i64::try_from(n) {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(PgError::new(
            NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "value \"{}\" is out of range for type {ty}",
                String::from_utf8_lossy(text)
            ),
        )),
    }
}

fn bad_input(ty: &str, text: &[u8]) -> PgError {
    PgError::new(
        INVALID_TEXT_REPRESENTATION,
        format!(
            "invalid input syntax for type {ty}: \"{}\"",
            String::from_utf8_lossy(text)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_input_follows_int4in() {
        assert_eq!(parse_int4(b" 42 "), Ok(42));
        assert_eq!(parse_int4(b"-7"), Ok(-7));
        assert_eq!(parse_int4(b"+7"), Ok(7));
        assert_eq!(
            parse_int4(b"oops").map_err(|e| e.code),
            Err(INVALID_TEXT_REPRESENTATION)
        );
        assert_eq!(
            parse_int4(b"").map_err(|e| e.code),
            Err(INVALID_TEXT_REPRESENTATION)
        );
        assert_eq!(
            parse_int4(b"2147483648").map_err(|e| e.code),
            Err(NUMERIC_VALUE_OUT_OF_RANGE)
        );
        assert_eq!(parse_int4(b"-2147483648"), Ok(i32::MIN));
    }

    #[test]
    fn text_and_binary_forms() {
        let mut b = BytesMut::new();
        Value::Int4(12).put(&mut b, false);
        Value::Int4(12).put(&mut b, true);
        Value::Null.put(&mut b, false);
        Value::Void.put(&mut b, false);
        assert_eq!(
            &b[..],
            b"\0\0\0\x0212\0\0\0\x04\0\0\0\x0c\xff\xff\xff\xff\0\0\0\0"
        );
    }
}

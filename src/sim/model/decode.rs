//! The bodies of the extended-protocol messages the model reads (checked reads; a short or
//! malformed body is PostgreSQL's 08P01), parameter types, and Bind's parameters through
//! their types' input functions.

use bytes::Bytes;

use crate::protocol::cursor::Cursor;

use super::error::{PgError, INDETERMINATE_DATATYPE};
use super::sql::Stmt;
use super::value::{Ty, Value};

pub fn malformed<T>(_: T) -> PgError {
    PgError::protocol("invalid message format")
}

/// A Bind body.
pub struct BindMsg {
    pub portal: String,
    pub stmt: String,
    pub param_formats: Vec<i16>,
    pub params: Vec<Option<Bytes>>,
    pub result_formats: Vec<i16>,
}

pub fn decode_bind(body: &[u8]) -> Result<BindMsg, PgError> {
    let mut c = Cursor::new(body);
    let portal = c.str().map_err(malformed)?.to_owned();
    let stmt = c.str().map_err(malformed)?.to_owned();
    let shorts = |c: &mut Cursor| -> Result<Vec<i16>, PgError> {
        let n = c.i16().map_err(malformed)?;
        (0..n).map(|_| c.i16().map_err(malformed)).collect()
    };
    let param_formats = shorts(&mut c)?;
    let n = c.i16().map_err(malformed)?;
    let mut params = Vec::new();
    for _ in 0..n {
        let len = c.i32().map_err(malformed)?;
        params.push(match usize::try_from(len) {
            Ok(len) => Some(Bytes::copy_from_slice(c.take(len).map_err(malformed)?)),
            Err(_) => None,
        });
    }
    let result_formats = shorts(&mut c)?;
    Ok(BindMsg {
        portal,
        stmt,
        param_formats,
        params,
        result_formats,
    })
}

/// The target of Describe or Close: `S` or `P`, and the name.
pub fn target(body: &[u8]) -> Result<(u8, String), PgError> {
    let mut c = Cursor::new(body);
    let kind = c.u8().map_err(malformed)?;
    Ok((kind, c.str().map_err(malformed)?.to_owned()))
}

/// Parameter types: those Parse declared (0: unspecified), else what the statement implies.
pub fn param_types(declared: &[u32], stmt: Option<&Stmt>) -> Result<Vec<Ty>, PgError> {
    let implied = stmt.map(Stmt::param_types).unwrap_or_default();
    (0..declared.len().max(implied.len()))
        .map(|i| {
            let given = declared.get(i).copied().filter(|&oid| oid != 0);
            given
                .map(|oid| Ty::from_oid(oid).unwrap_or(Ty::Text))
                .or(implied.get(i).copied().flatten())
                .ok_or_else(|| {
                    let msg = format!("could not determine data type of parameter ${}", i + 1);
                    PgError::new(INDETERMINATE_DATATYPE, msg)
                })
        })
        .collect()
}

/// Bind's parameters through their types' input functions (text) or binary forms.
pub fn convert_params(m: &BindMsg, types: &[Ty]) -> Result<Vec<Value>, PgError> {
    let format = |i: usize| match m.param_formats.as_slice() {
        [] => 0,
        [one] => *one,
        many => many[i],
    };
    let mut out = Vec::with_capacity(types.len());
    for (i, (v, ty)) in m.params.iter().zip(types).enumerate() {
        let Some(v) = v else {
            out.push(Value::Null);
            continue;
        };
        out.push(match (format(i), ty) {
            (1, Ty::Int4) => match <[u8; 4]>::try_from(&v[..]) {
                Ok(b) => Value::Int4(i32::from_be_bytes(b)),
                Err(_) => {
                    let msg = format!("incorrect binary data format in bind parameter {}", i + 1);
                    return Err(PgError::new("22P03", msg));
                }
            },
            (1, Ty::Text) => Value::Text(v.clone()),
            (_, Ty::Text) => Value::Text(v.clone()),
            (_, ty) => ty.input(v)?,
        });
    }
    Ok(out)
}

//! SCRAM-SHA-256 messages as a server sees them (RFC 5802 section 7, RFC 7677; PostgreSQL docs
//! "SASL Authentication"): parsing client-first and client-final, encoding server-first and
//! server-final, and the client-side encoders the round-trip tests and fuzz targets use. No
//! cryptography here: see `auth::scram`.

use super::cursor::ParseError;

/// The mechanism name PostgreSQL advertises; channel binding (`-PLUS`) is not offered.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// Longest SCRAM message accepted from a client; real ones are under 200 bytes.
pub const MAX_MESSAGE: usize = 1024;

/// The channel-binding flag of the GS2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelBinding<'a> {
    /// `n`: the client does not support channel binding.
    None,
    /// `y`: the client supports it but thinks the server does not.
    NotAdvertised,
    /// `p=name`: the client requires binding of type `name`.
    Required(&'a str),
}

/// client-first-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst<'a> {
    pub binding: ChannelBinding<'a>,
    /// The GS2 header as sent (`n,,`), which client-final echoes base64-encoded.
    pub gs2_header: &'a str,
    /// client-first-message-bare: the part that enters the AuthMessage.
    pub bare: &'a str,
    /// `n=`: PostgreSQL ignores it (the startup packet names the user).
    pub user: &'a str,
    /// `r=`: the client nonce.
    pub nonce: &'a str,
}

/// client-final-message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinal<'a> {
    /// `c=`: base64 of the GS2 header (plus binding data, which we never request).
    pub binding: &'a str,
    /// `r=`: client nonce followed by server nonce.
    pub nonce: &'a str,
    /// client-final-message-without-proof: the part that enters the AuthMessage.
    pub without_proof: &'a str,
    /// `p=`: base64 of the ClientProof.
    pub proof: &'a str,
}

fn text(data: &[u8]) -> Result<&str, ParseError> {
    if data.len() > MAX_MESSAGE {
        return Err(ParseError::Invalid("SCRAM message too long"));
    }
    std::str::from_utf8(data).map_err(|_| ParseError::Utf8)
}

/// `printable` from RFC 5802: what a nonce may hold (no comma).
fn is_printable(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn attr(part: Option<&str>, name: char) -> Result<&str, ParseError> {
    let part = part.ok_or(ParseError::Invalid("SCRAM attribute missing"))?;
    let mut chars = part.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(ParseError::Invalid("SCRAM attribute out of order"));
    }
    Ok(&part[2..])
}

/// Parses client-first-message: `gs2-cbind-flag "," [authzid] "," n=user,r=nonce[,ext...]`.
pub fn parse_client_first(data: &[u8]) -> Result<ClientFirst<'_>, ParseError> {
    let s = text(data)?;
    let (flag, rest) = s
        .split_once(',')
        .ok_or(ParseError::Invalid("SCRAM GS2 header"))?;
    let binding = match flag {
        "n" => ChannelBinding::None,
        "y" => ChannelBinding::NotAdvertised,
        f => match f.strip_prefix("p=") {
            Some(name) if !name.is_empty() => ChannelBinding::Required(name),
            _ => return Err(ParseError::Invalid("SCRAM channel-binding flag")),
        },
    };
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ParseError::Invalid("SCRAM GS2 header"))?;
    if !authzid.is_empty() {
        // PostgreSQL does not support authorization identities either.
        return Err(ParseError::Invalid("SCRAM authzid is not supported"));
    }
    let gs2_header = &s[..flag.len() + 2];
    if bare.starts_with("m=") {
        return Err(ParseError::Invalid(
            "SCRAM mandatory extensions are not supported",
        ));
    }
    let mut parts = bare.split(',');
    let user = attr(parts.next(), 'n')?;
    let nonce = attr(parts.next(), 'r')?;
    if !is_printable(nonce) {
        return Err(ParseError::Invalid("SCRAM nonce"));
    }
    Ok(ClientFirst {
        binding,
        gs2_header,
        bare,
        user,
        nonce,
    })
}

/// Parses client-final-message: `c=binding,r=nonce[,ext...],p=proof`.
pub fn parse_client_final(data: &[u8]) -> Result<ClientFinal<'_>, ParseError> {
    let s = text(data)?;
    let (without_proof, proof) = s
        .rsplit_once(",p=")
        .ok_or(ParseError::Invalid("SCRAM proof missing"))?;
    let mut parts = without_proof.split(',');
    let binding = attr(parts.next(), 'c')?;
    let nonce = attr(parts.next(), 'r')?;
    if !is_printable(nonce) || proof.is_empty() || proof.contains(',') {
        return Err(ParseError::Invalid("SCRAM client-final"));
    }
    Ok(ClientFinal {
        binding,
        nonce,
        without_proof,
        proof,
    })
}

/// server-first-message as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFirst<'a> {
    /// `r=`: the client's nonce followed by the server's.
    pub nonce: &'a str,
    /// `s=`: base64 of the salt.
    pub salt: &'a str,
    /// `i=`: the iteration count.
    pub iterations: u32,
}

/// Parses server-first-message: `r=nonce,s=salt,i=iterations[,ext...]`.
pub fn parse_server_first(data: &[u8]) -> Result<ServerFirst<'_>, ParseError> {
    let s = text(data)?;
    if s.starts_with("m=") {
        return Err(ParseError::Invalid(
            "SCRAM mandatory extensions are not supported",
        ));
    }
    let mut parts = s.split(',');
    let nonce = attr(parts.next(), 'r')?;
    let salt = attr(parts.next(), 's')?;
    let iterations = attr(parts.next(), 'i')?
        .parse::<u32>()
        .ok()
        .filter(|&i| i > 0)
        .ok_or(ParseError::Invalid("SCRAM iteration count"))?;
    if !is_printable(nonce) || salt.is_empty() {
        return Err(ParseError::Invalid("SCRAM server-first"));
    }
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// Parses server-final-message: the base64 ServerSignature of `v=`, or the server's `e=`
/// reason as the error.
pub fn parse_server_final(data: &[u8]) -> Result<&str, ParseError> {
    let s = text(data)?;
    let first = s.split(',').next().unwrap_or("");
    if first.starts_with("e=") {
        return Err(ParseError::Invalid("SCRAM server-final reports an error"));
    }
    attr(Some(first), 'v')
}

/// server-first-message: `r=nonce,s=salt,i=iterations` (salt already base64).
pub fn server_first(nonce: &str, salt_b64: &str, iterations: u32) -> String {
    format!("r={nonce},s={salt_b64},i={iterations}")
}

/// server-final-message: `v=signature` (base64), or `e=reason`.
pub fn server_final(signature_b64: &str) -> String {
    format!("v={signature_b64}")
}

/// client-first-message for binding flag `n` and no authzid (what libpq sends).
pub fn client_first(user: &str, nonce: &str) -> String {
    format!("n,,n={user},r={nonce}")
}

/// client-final-message with the given binding (base64) and proof (base64).
pub fn client_final(binding: &str, nonce: &str, proof: &str) -> String {
    format!("c={binding},r={nonce},p={proof}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_client_first_parses() {
        let m = parse_client_first(b"n,,n=,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(m.binding, ChannelBinding::None);
        assert_eq!(m.gs2_header, "n,,");
        assert_eq!(m.bare, "n=,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(m.nonce, "rOprNGfwEbeRWgbNEkqO");
        let m = parse_client_first(b"p=tls-server-end-point,,n=,r=abc").unwrap();
        assert_eq!(m.binding, ChannelBinding::Required("tls-server-end-point"));
        assert_eq!(m.gs2_header, "p=tls-server-end-point,,");
    }

    #[test]
    fn malformed_client_first_is_refused() {
        for bad in [
            &b""[..],
            b"n",
            b"n,",
            b"x,,n=,r=a",
            b"n,a=me,n=,r=abc",
            b"n,,r=abc",
            b"n,,n=,r=",
            b"n,,m=ext,n=,r=abc",
            b"n,,n=\xff,r=abc",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        assert!(parse_client_first(&[b'a'; MAX_MESSAGE + 1]).is_err());
    }

    #[test]
    fn server_messages_parse_as_a_client_reads_them() {
        let text = server_first("abcXYZ", "c2FsdA==", 4096);
        let m = parse_server_first(text.as_bytes()).unwrap();
        assert_eq!(
            (m.nonce, m.salt, m.iterations),
            ("abcXYZ", "c2FsdA==", 4096)
        );
        for bad in [
            &b"r=abc,s=c2FsdA=="[..],
            b"r=abc,s=,i=1",
            b"r=abc,s=x,i=0",
            b"m=x,r=a,s=b,i=1",
        ] {
            assert!(parse_server_first(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_server_final(b"v=c2ln").unwrap(), "c2ln");
        assert!(parse_server_final(b"e=invalid-proof").is_err());
    }

    #[test]
    fn client_final_round_trips() {
        let text = client_final("biws", "abcDEF", "cHJvb2Y=");
        let m = parse_client_final(text.as_bytes()).unwrap();
        assert_eq!(
            (m.binding, m.nonce, m.proof),
            ("biws", "abcDEF", "cHJvb2Y=")
        );
        assert_eq!(m.without_proof, "c=biws,r=abcDEF");
        for bad in [
            &b"c=biws,r=abc"[..],
            b"r=abc,c=biws,p=x",
            b"c=biws,r=abc,p=",
        ] {
            assert!(parse_client_final(bad).is_err(), "{bad:?}");
        }
    }
}

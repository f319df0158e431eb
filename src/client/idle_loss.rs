//! A held server that ends while its client sits at a transaction boundary (a fast shutdown's
//! or `pg_terminate_backend`'s FATAL, then the close) ends that server only: nothing of the
//! client's was running there, so the client keeps its session and its next transaction takes
//! another server. Inside a transaction, or with anything in flight, the FATAL is the
//! client's and ends its session, as directly. A server that ends while it answers its idle
//! check (`relay::check`) is replaced the same way, the client's messages waiting meanwhile.

use bytes::BytesMut;

use super::session::Session;
use crate::pool::CloseReason;
use crate::protocol::{backend, frame};
use crate::relay::{Event, Input};

impl Session {
    /// Whether the read `r` of the held server is its end at a boundary: the client idle
    /// outside a transaction with nothing owed or buffered, and the server closed, failed,
    /// or sent a FATAL (PostgreSQL closes right after one).
    #[inline(always)]
    pub(super) fn idle_server_left(&self, r: &std::io::Result<usize>) -> bool {
        let Some(srv) = self.server.as_ref() else {
            return false;
        };
        let stand = self.relay.stand(Some(&srv.state));
        if !stand.quiet() && !stand.checking() {
            return false;
        }
        match r {
            Ok(0) | Err(_) => true,
            Ok(_) => holds_fatal(&srv.state.rbuf),
        }
    }

    /// Lets the held server go as unusable (`why`) and keeps the client. Returns committed
    /// subscriptions still to make ([`Session::follow_pin`]).
    #[cold]
    pub(super) fn lose_server(&mut self, why: CloseReason) -> Option<Vec<crate::relay::Subscribe>> {
        let mut conn = self.server.take()?;
        let mut wire = Session::wire(&mut self.client, &self.shared.cancels);
        self.relay
            .handle(Some(&mut conn.state), Input::ServerLeft, &mut wire);
        self.cancel.clear();
        self.pool.discard(conn, why);
        // The pin, whose state went with the server, ended.
        match self.relay.poll(None, &mut wire) {
            Some(Event::Pin(change)) => self.follow_pin(change),
            _ => None,
        }
    }
}

/// Whether the whole messages at the front of `rbuf` include an ErrorResponse of severity
/// FATAL or PANIC (protocol 53.7: the backend closes after one). An incomplete message ends
/// the scan: its rest comes with the next read.
fn holds_fatal(rbuf: &BytesMut) -> bool {
    let mut at = 0;
    while let Some((tag, len)) = frame::peek_header(&rbuf[at..]) {
        let total = 1 + len as usize;
        if len < 4 || rbuf.len() - at < total {
            return false;
        }
        if tag == backend::ERROR_RESPONSE_TAG {
            let body = &rbuf[at + frame::HEADER_LEN..at + total];
            if backend::parse_error(body)
                .is_ok_and(|e| e.severity == "FATAL" || e.severity == "PANIC")
            {
                return true;
            }
        }
        at += total;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::backend::ErrorFields;

    fn error(severity: &str) -> BytesMut {
        let mut buf = BytesMut::new();
        let fields = ErrorFields {
            severity: severity.into(),
            code: "57P01".into(),
            message: "terminating connection due to administrator command".into(),
            ..Default::default()
        };
        backend::error_response(&mut buf, &fields);
        buf
    }

    #[test]
    fn a_fatal_behind_a_notice_is_found_and_an_error_is_not_one() {
        let mut buf = BytesMut::new();
        backend::parameter_status(&mut buf, "application_name", "x");
        buf.extend_from_slice(&error("FATAL"));
        assert!(holds_fatal(&buf));
        assert!(!holds_fatal(&error("ERROR")));
        let whole = error("FATAL");
        assert!(
            !holds_fatal(&BytesMut::from(&whole[..whole.len() - 1])),
            "a cut message is not read"
        );
    }
}

//! The statement shapes the model recognises, one function per leading keyword, over the
//! tokens of one statement.

use super::lex::Tok;
use super::{Expr, Level, Select, Stmt};
use crate::sim::model::value::Ty;

/// A cursor over one statement's tokens.
struct P<'a> {
    t: &'a [Tok],
    i: usize,
}

impl P<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn word(&mut self, w: &str) -> bool {
        let hit = matches!(self.peek(), Some(Tok::Word(x)) if x == w);
        self.i += usize::from(hit);
        hit
    }

    fn sym(&mut self, s: &str) -> bool {
        let hit = matches!(self.peek(), Some(Tok::Sym(x)) if *x == s);
        self.i += usize::from(hit);
        hit
    }

    fn ident(&mut self) -> Option<String> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.i += 1;
                Some(w)
            }
            _ => None,
        }
    }

    /// An integer literal, with an optional minus sign.
    fn int(&mut self) -> Option<i64> {
        let at = self.i;
        let negative = self.sym("-");
        match self.peek() {
            Some(Tok::Int(n)) => {
                let n = *n;
                self.i += 1;
                Some(if negative { -n } else { n })
            }
            _ => {
                self.i = at;
                None
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.i += 1;
                Some(s)
            }
            _ => None,
        }
    }

    fn end(&self) -> bool {
        self.i == self.t.len()
    }

    /// `( <int> )`.
    fn int_arg(&mut self) -> Option<i64> {
        (self.sym("(")).then_some(())?;
        let n = self.int()?;
        self.sym(")").then_some(n)
    }
}

/// The statement `t` is, if it is one of the shapes.
pub fn statement(t: &[Tok]) -> Option<Stmt> {
    let mut p = P { t, i: 0 };
    let s = match p.ident()?.as_str() {
        "select" => Stmt::Select(select(&mut p)?),
        "insert" => insert(&mut p)?,
        "copy" => copy(&mut p)?,
        "begin" => {
            let _ = p.word("transaction") || p.word("work");
            Stmt::Begin
        }
        "start" if p.word("transaction") => Stmt::Begin,
        "commit" | "end" => Stmt::Commit,
        "rollback" | "abort" => Stmt::Rollback,
        "set" => set(&mut p)?,
        "reset" => Stmt::Reset {
            name: Some(p.ident()?).filter(|n| n != "all"),
        },
        "show" => Stmt::Show { name: p.ident()? },
        "prepare" => prepare(&mut p)?,
        "execute" => execute(&mut p)?,
        "deallocate" => {
            p.word("prepare");
            Stmt::Deallocate {
                name: Some(p.ident()?).filter(|n| n != "all"),
            }
        }
        "discard" if p.word("all") => Stmt::DiscardAll,
        "discard" if p.word("sequences") => Stmt::DiscardSequences,
        "listen" => Stmt::Listen {
            channel: p.ident()?,
        },
        "unlisten" if p.sym("*") => Stmt::Unlisten { channel: None },
        "unlisten" => Stmt::Unlisten {
            channel: Some(p.ident()?),
        },
        "notify" => notify(&mut p)?,
        "create" => create_temp(&mut p)?,
        "do" => raise(&mut p)?,
        _ => return None,
    };
    p.end().then_some(s)
}

fn select(p: &mut P) -> Option<Select> {
    let at = p.i;
    if p.word("n") && p.word("from") {
        let table = p.ident()?;
        let sorted = p.word("order") && p.word("by") && p.word("n");
        return Some(Select::Column { table, sorted });
    }
    p.i = at;
    if p.word("count") && p.sym("(") && p.sym("*") && p.sym(")") {
        let sum = p.sym(",");
        if sum {
            let coalesce = p.word("coalesce") && p.sym("(") && p.word("sum") && p.sym("(");
            let rest = coalesce && p.word("n") && p.sym(")") && p.sym(",");
            (rest && p.int()? == 0 && p.sym(")")).then_some(())?;
        }
        p.word("from").then_some(())?;
        return Some(Select::Count {
            table: p.ident()?,
            sum,
        });
    }
    p.i = at;
    let mut exprs = vec![expr(p)?];
    while p.sym(",") {
        exprs.push(expr(p)?);
    }
    Some(Select::Exprs(exprs))
}

fn expr(p: &mut P) -> Option<Expr> {
    if let Some(n) = p.int() {
        if p.sym("/") {
            return Some(Expr::Div(n, p.int()?));
        }
        return Some(Expr::Int(n));
    }
    if let Some(s) = p.string() {
        return Some(Expr::Text(s));
    }
    if let Some(Tok::Param(n)) = p.peek() {
        let n = *n;
        p.i += 1;
        let ty = if p.sym("::") { Some(cast(p)?) } else { None };
        return (n > 0).then_some(Expr::Param(n, ty));
    }
    if p.sym("(") {
        return reset_val(p);
    }
    let mut f = p.ident()?;
    if f == "pg_catalog" && p.sym(".") {
        f = p.ident()?;
    }
    Some(match f.as_str() {
        "repeat" => {
            (p.sym("(")).then_some(())?;
            let s = p.string()?;
            (p.sym(",")).then_some(())?;
            let n = p.int()?;
            (p.sym(")")).then_some(())?;
            Expr::Repeat(s, n)
        }
        "pg_advisory_lock" => Expr::AdvisoryLock(p.int_arg()?),
        "pg_try_advisory_lock" => Expr::TryAdvisoryLock(p.int_arg()?),
        "pg_advisory_unlock" => Expr::AdvisoryUnlock(p.int_arg()?),
        "pg_advisory_unlock_all" => {
            (p.sym("(") && p.sym(")")).then_some(Expr::AdvisoryUnlockAll)?
        }
        "pg_backend_pid" => (p.sym("(") && p.sym(")")).then_some(Expr::BackendPid)?,
        "set_config" => {
            let name = (p.sym("(")).then(|| p.string())??;
            let value = (p.sym(",")).then(|| p.string())??;
            let local = (p.sym(",")).then(|| p.ident())??;
            let local = match local.as_str() {
                "true" => true,
                "false" => false,
                _ => return None,
            };
            p.sym(")").then_some(Expr::SetConfig(name, value, local))?
        }
        "pg_is_in_recovery" => (p.sym("(") && p.sym(")")).then_some(Expr::InRecovery)?,
        "setseed" => {
            // A fraction in [-1, 1]: `-`, an integer part, `.`, the digits.
            (p.sym("(")).then_some(())?;
            p.sym("-");
            p.int()?;
            if p.sym(".") {
                p.int()?;
            }
            p.sym(")").then_some(Expr::SetSeed)?
        }
        "pg_terminate_backend" => {
            let ok = p.sym("(") && p.word("pg_backend_pid") && p.sym("(") && p.sym(")");
            (ok && p.sym(")")).then_some(Expr::TerminateSelf)?
        }
        _ => return None,
    })
}

/// `(select reset_val from [pg_catalog.]pg_settings where name = '<setting>')`, after `(`.
fn reset_val(p: &mut P) -> Option<Expr> {
    let head = p.word("select") && p.word("reset_val") && p.word("from");
    let schema = head && (!p.word("pg_catalog") || p.sym("."));
    let table = schema && p.word("pg_settings") && p.word("where") && p.word("name");
    let name = (table && p.sym("=")).then(|| p.string())??;
    p.sym(")").then_some(Expr::ResetVal(name))
}

fn cast(p: &mut P) -> Option<Ty> {
    Some(match p.ident()?.as_str() {
        "text" => Ty::Text,
        "int" | "int4" | "integer" => Ty::Int4,
        "int8" | "bigint" => Ty::Int8,
        "bool" | "boolean" => Ty::Bool,
        _ => return None,
    })
}

fn insert(p: &mut P) -> Option<Stmt> {
    (p.word("into")).then_some(())?;
    let table = p.ident()?;
    (p.word("values") && p.sym("(")).then_some(())?;
    let value = match expr(p)? {
        v @ (Expr::Int(_) | Expr::Param(_, None | Some(Ty::Int4))) => v,
        _ => return None,
    };
    p.sym(")").then_some(Stmt::Insert { table, value })
}

fn copy(p: &mut P) -> Option<Stmt> {
    if p.sym("(") {
        let ok = p.word("select") && p.word("n") && p.word("from");
        let table = ok.then(|| p.ident())??;
        let ok = p.word("order") && p.word("by") && p.word("n") && p.sym(")");
        return (ok && p.word("to") && p.word("stdout")).then_some(Stmt::CopyTo {
            table,
            sorted: true,
        });
    }
    let table = p.ident()?;
    if p.word("from") && p.word("stdin") {
        return Some(Stmt::CopyFrom { table });
    }
    (p.word("to") && p.word("stdout")).then_some(Stmt::CopyTo {
        table,
        sorted: false,
    })
}

fn set(p: &mut P) -> Option<Stmt> {
    let local = p.word("local");
    if !local {
        p.word("session");
    }
    let name = p.ident()?;
    (p.sym("=") || p.word("to")).then_some(())?;
    let value = if let Some(s) = p.string() {
        Some(s)
    } else if let Some(n) = p.int() {
        Some(n.to_string())
    } else {
        Some(p.ident()?).filter(|w| w != "default")
    };
    Some(Stmt::Set { local, name, value })
}

fn prepare(p: &mut P) -> Option<Stmt> {
    let name = p.ident()?;
    (p.word("as")).then_some(())?;
    let body = statement(&p.t[p.i..])?;
    p.i = p.t.len();
    matches!(body, Stmt::Select(_) | Stmt::Insert { .. }).then(|| Stmt::Prepare {
        name,
        body: Box::new(body),
    })
}

fn execute(p: &mut P) -> Option<Stmt> {
    let name = p.ident()?;
    let mut args = Vec::new();
    if p.sym("(") {
        loop {
            args.push(match expr(p)? {
                e @ (Expr::Int(_) | Expr::Text(_)) => e,
                _ => return None,
            });
            if p.sym(")") {
                break;
            }
            p.sym(",").then_some(())?;
        }
    }
    Some(Stmt::Execute { name, args })
}

fn notify(p: &mut P) -> Option<Stmt> {
    let channel = p.ident()?;
    let payload = if p.sym(",") {
        p.string()?
    } else {
        String::new()
    };
    Some(Stmt::Notify { channel, payload })
}

fn create_temp(p: &mut P) -> Option<Stmt> {
    ((p.word("temp") || p.word("temporary")) && p.word("table")).then_some(())?;
    let table = p.ident()?;
    let column = p.sym("(") && p.word("n");
    let ty = column && (p.word("int") || p.word("integer") || p.word("int4"));
    (ty && p.sym(")")).then_some(Stmt::CreateTemp { table })
}

/// `do $$ begin raise <level> '<message>'; end $$`, or `do $$ begin perform <expr>; end $$`.
fn raise(p: &mut P) -> Option<Stmt> {
    let Some(Tok::Dollar(body)) = p.peek() else {
        return None;
    };
    let toks = super::lex::lex(body).ok()?;
    p.i += 1;
    let mut b = P { t: &toks, i: 0 };
    b.word("begin").then_some(())?;
    if b.word("perform") {
        let e = expr(&mut b)?;
        (b.sym(";") && b.word("end")).then_some(())?;
        b.sym(";");
        return b.end().then_some(Stmt::DoPerform(e));
    }
    b.word("raise").then_some(())?;
    let level = match b.ident()?.as_str() {
        "notice" => Level::Notice,
        "warning" => Level::Warning,
        "exception" => Level::Exception,
        _ => return None,
    };
    let message = b.string()?;
    (b.sym(";") && b.word("end")).then_some(())?;
    b.sym(";");
    b.end().then_some(Stmt::Raise { level, message })
}

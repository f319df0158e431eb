//! Reading credentials from disk: PgBouncer's `userlist.txt` and a directory of password files
//! (a Kubernetes Secret mounted as a volume: one file per key, plus `..data` bookkeeping).

use std::path::Path;

use super::AuthError;

fn read(path: &Path) -> Result<String, AuthError> {
    std::fs::read_to_string(path).map_err(|source| AuthError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `"user" "password"` per line; `""` inside quotes is a quote; blank lines and lines starting
/// with `;` or `#` are skipped (PgBouncer's format).
pub fn read_userlist(path: &Path) -> Result<Vec<(String, String)>, AuthError> {
    let text = read(path)?;
    parse_userlist(&text).map_err(|line| AuthError::Syntax {
        path: path.to_owned(),
        line,
    })
}

/// The entries of a userlist text, in order; on a malformed line, its number (from 1).
pub fn parse_userlist(text: &str) -> Result<Vec<(String, String)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        let (user, rest) = quoted(line).ok_or(i + 1)?;
        let (password, rest) = quoted(rest.trim_start()).ok_or(i + 1)?;
        if user.is_empty() || !(rest.trim().is_empty() || rest.trim_start().starts_with('"')) {
            return Err(i + 1);
        }
        out.push((user, password));
    }
    Ok(out)
}

/// One `"..."` field at the start of `s`, and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices().peekable();
    let mut value = String::new();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            value.push(c);
            continue;
        }
        if chars.peek().map(|&(_, c)| c) == Some('"') {
            chars.next();
            value.push('"');
            continue;
        }
        return Some((value, &s[i + 2..]));
    }
    None
}

/// Each regular file (symlinks followed) whose name does not start with `.`: the user is the
/// file name, the password its first line.
pub fn read_passwords_dir(dir: &Path) -> Result<Vec<(String, String)>, AuthError> {
    let err = |source| AuthError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        let text = read(&path)?;
        out.push((name, text.lines().next().unwrap_or("").to_owned()));
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userlist_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("userlist.txt");
        std::fs::write(
            &p,
            "; comment\n\"alice\" \"SCRAM-SHA-256$4096:c2FsdA==$a:b\"\n\n\"bob\" \"pa\"\"ss\" \"\"\n",
        )
        .unwrap();
        let users = read_userlist(&p).unwrap();
        assert_eq!(users[0].0, "alice");
        assert_eq!(users[1], ("bob".into(), "pa\"ss".into()));
        std::fs::write(&p, "\"carol\" \"topsecret\n").unwrap();
        let err = read_userlist(&p).unwrap_err().to_string();
        assert!(
            err.contains("line 1") && !err.contains("topsecret"),
            "{err}"
        );
    }

    #[test]
    fn secret_volume_layout() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("..2026_01_01");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("app"), "app-pass\n").unwrap();
        std::os::unix::fs::symlink(&data, dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("..data/app"), dir.path().join("app")).unwrap();
        let users = read_passwords_dir(dir.path()).unwrap();
        assert_eq!(users, vec![("app".into(), "app-pass".into())]);
    }
}

//! Running libpq command-line tools (psql, pgbench) with a clean environment.

use std::process::{Command, Output, Stdio};

/// A libpq tool with the environment that would redirect it removed.
pub fn pg_tool(name: &str) -> Command {
    let mut cmd = Command::new(super::bin(name));
    for var in super::pg::PG_ENV {
        cmd.env_remove(var);
    }
    cmd.env("PGCONNECT_TIMEOUT", "10").stdin(Stdio::null());
    cmd
}

/// pgbench's `number of transactions actually processed` from its report.
pub fn pgbench_processed(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no processed count in pgbench output:\n{stdout}"))
}

/// Runs a tool to completion with `stdin` fed to it, capturing its output.
pub fn run_tool(cmd: &mut Command, stdin: Option<&str>) -> Output {
    use std::io::Write;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for tool")
}

/// A finished tool's stdout and stderr as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

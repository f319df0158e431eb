//! `droid-pool-operator`: prints the CRD (`crd`) or runs the controller (`run`, the default).

use std::process::ExitCode;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("crd") => match droid_pool::operator::crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot print the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: droid-pool-operator crd (the controller comes in a later commit)");
            ExitCode::from(2)
        }
    }
}

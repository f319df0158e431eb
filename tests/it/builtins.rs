//! The built-in function names the session-state detector takes for harmless
//! (`session_state::builtins`, made by `scripts/gen-builtins.sh`) against the PostgreSQL the
//! suite runs: every name listed is a function of its `pg_catalog` (else a function of the
//! database's own with that name would be taken for a built-in), and on the major the list
//! was made from, the list is that catalog's, whole.

use std::collections::BTreeSet;

use droid_pool::session_state::builtins;

use crate::support;

#[tokio::test]
async fn the_builtin_list_is_the_servers_catalog() {
    let pg = support::shared();
    let c = pg.connect("droid", support::DB).await;
    let major: i32 = c
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[],
        )
        .await
        .expect("version")
        .get(0);
    let rows = c
        .query(
            "SELECT DISTINCT proname::text FROM pg_catalog.pg_proc \
             WHERE pronamespace = 'pg_catalog'::regnamespace",
            &[],
        )
        .await
        .expect("pg_proc");
    let server: BTreeSet<Vec<u8>> = rows
        .iter()
        .map(|r| r.get::<_, String>(0).into_bytes())
        .collect();
    let listed: BTreeSet<Vec<u8>> = builtins::NAMES.iter().map(|n| n.to_vec()).collect();
    let unknown: Vec<_> = listed
        .difference(&server)
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    assert!(
        unknown.is_empty(),
        "listed as built-ins but not in PostgreSQL {major}'s pg_catalog (run scripts/gen-builtins.sh): {unknown:?}"
    );
    if major as u32 == builtins::MAJOR {
        let missing: Vec<_> = server
            .difference(&listed)
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        assert!(missing.is_empty(), "not listed: {missing:?}");
    }
    // The keywords: PostgreSQL's own reserved and column-name keywords.
    let kw = c
        .query(
            "SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'C')",
            &[],
        )
        .await
        .expect("keywords");
    for r in kw {
        let w: String = r.get(0);
        assert!(
            builtins::NOT_CALLED.contains(&w.as_bytes()),
            "keyword {w} missing (run scripts/gen-builtins.sh)"
        );
    }
}

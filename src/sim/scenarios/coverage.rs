//! Which test of tests/it/prepared.rs and core.rs each scenario ports, and why the others
//! need a real PostgreSQL; the test below keeps this list in step with those files.

/// What became of one integration test.
#[derive(Debug, Clone, Copy)]
pub enum Cover {
    /// Its scenario(s) run against the model.
    Ported(&'static [&'static str]),
    /// Its scenario(s) run against the model, but for what only a real server shows (said).
    Partly(&'static [&'static str], &'static str),
    /// It stays against PostgreSQL only, for this reason.
    RealOnly(&'static str),
}

use Cover::{Partly, Ported, RealOnly};

const DRIVER: &str = "real drivers' own behaviour (tokio-postgres, 20 concurrent clients)";
const PLAN: &str = "a schema change from outside and PostgreSQL's cached-plan 0A000 retry";
const STARTUP: &str = "the startup phase and login, which the harness does not run";

/// Every test function of the two files, as `<file>::<fn>`.
pub const COVERAGE: &[(&str, Cover)] = &[
    (
        "prepared.rs::prepared_statement_tracked",
        Ported(&["tracked_statement_replayed_on_another_server"]),
    ),
    (
        "prepared.rs::names_do_not_collide",
        Ported(&["two_clients_same_name"]),
    ),
    (
        "prepared.rs::close_tracked",
        Ported(&["close_answered_by_pooler_then_parse_again"]),
    ),
    (
        "prepared.rs::sql_prepare_not_tracked",
        Partly(&["sql_prepare_forwarded_unchanged"], "EXECUTE on another server failing with PostgreSQL's 26000 (a documented difference from a direct run)"),
    ),
    (
        "prepared.rs::replayed_parse_complete_never_reaches_client",
        Ported(&["replayed_parse_complete_hidden_with_flush_and_pipeline"]),
    ),
    (
        "prepared.rs::renamed_messages_get_their_length_rewritten",
        Partly(&["renamed_messages_of_many_name_lengths"], "declared parameter types and binary formats (programs send text)"),
    ),
    (
        "prepared.rs::long_names_stay_distinct_on_the_server",
        Ported(&["long_names_differing_at_their_end"]),
    ),
    (
        "prepared.rs::no_replay_where_the_statement_exists",
        Ported(&["no_replay_where_present_while_moving"]),
    ),
    (
        "prepared.rs::no_replay_on_the_same_server",
        Ported(&["no_replay_on_the_same_server"]),
    ),
    (
        "prepared.rs::unnamed_statement_follows_the_client",
        Ported(&["unnamed_statement_follows_the_client"]),
    ),
    (
        "prepared.rs::unknown_name_gets_26000_from_the_pooler",
        Ported(&["unknown_name_26000_from_the_pooler"]),
    ),
    (
        "prepared.rs::pooler_error_inside_a_transaction_fails_it",
        Ported(&["pooler_error_fails_the_transaction"]),
    ),
    (
        "prepared.rs::close_is_answered_by_the_pooler_and_forwards_nothing",
        Ported(&["close_statement_not_forwarded_close_portal_is"]),
    ),
    (
        "prepared.rs::duplicate_parse_gets_42p05_from_the_pooler",
        Ported(&["duplicate_parse_42p05_from_the_pooler"]),
    ),
    (
        "prepared.rs::statement_is_kept_from_its_forwarded_parse",
        Ported(&["statement_kept_from_its_forwarded_parse"]),
    ),
    (
        "prepared.rs::parse_rejected_by_the_server_is_dropped",
        Ported(&["parse_rejected_by_the_server_is_dropped"]),
    ),
    (
        "prepared.rs::reparse_after_rejected_parse_in_one_pipeline",
        Ported(&["reparse_after_rejected_parse_pipelined"]),
    ),
    (
        "prepared.rs::pooler_answers_keep_their_order_in_a_pipeline",
        Ported(&["pooler_answers_in_pipeline_order"]),
    ),
    (
        "prepared.rs::pool_answers_sync_when_nothing_reached_a_server",
        Ported(&["pool_answers_sync_without_a_server"]),
    ),
    (
        "prepared.rs::statements_forgotten_when_the_client_leaves",
        Partly(
            &["other_client_unknown_name_then_its_own"],
            "a departed client's server copies closed by the next client: the harness's \
             checkout does not close them (the session driver does)",
        ),
    ),
    (
        "prepared.rs::deallocate_all_clears_in_pipeline_order",
        Ported(&["deallocate_all_in_pipeline_order"]),
    ),
    (
        "prepared.rs::discard_all_clears_in_both_protocols",
        Ported(&["discard_and_deallocate_all_in_both_protocols"]),
    ),
    (
        "prepared.rs::refused_discard_all_keeps_statements",
        Ported(&["refused_discard_all_keeps_statements"]),
    ),
    (
        "prepared.rs::close_skipped_after_an_error_keeps_the_statement",
        Ported(&["close_skipped_after_an_error"]),
    ),
    (
        "prepared.rs::describe_statement_replays",
        Ported(&["describe_statement_replays"]),
    ),
    (
        "prepared.rs::statements_follow_clients_across_servers",
        Ported(&["two_clients_same_name_moving_between_servers"]),
    ),
    (
        "prepared.rs::eviction_keeps_the_server_bounded",
        Partly(&["eviction_keeps_servers_bounded"], "scaled: a bound of 4 and 12 statements, not 50 and 500"),
    ),
    (
        "prepared.rs::session_mode_with_tracking_works",
        Ported(&["session_mode_with_tracking"]),
    ),
    ("prepared.rs::plan_change_is_retried_outside_a_transaction", RealOnly(PLAN)),
    ("prepared.rs::plan_change_retry_is_bounded", RealOnly(PLAN)),
    (
        "prepared.rs::client_statements_are_bounded",
        Ported(&["client_bound_53400_from_the_pooler"]),
    ),
    (
        "prepared.rs::deallocate_all_with_comments_clears_too",
        Ported(&["deallocate_all_with_comments"]),
    ),
    (
        "prepared.rs::discard_all_through_a_named_statement_clears_the_server_record",
        Ported(&["discard_all_through_a_named_statement"]),
    ),
    (
        "prepared.rs::statement_mode_with_tracking_works",
        Ported(&["statement_mode_with_tracking"]),
    ),
    (
        "prepared.rs::injected_close_of_a_stale_copy_skipped_after_an_error",
        Ported(&["injected_close_of_stale_copy_skipped"]),
    ),
    (
        "prepared.rs::injected_eviction_close_skipped_after_an_error",
        Ported(&["injected_eviction_close_skipped"]),
    ),
    ("prepared.rs::plan_change_retry_keeps_earlier_work_of_the_batch", RealOnly(PLAN)),
    ("prepared.rs::plan_change_retry_keeps_the_poolers_answers", RealOnly(PLAN)),
    ("prepared.rs::plan_change_without_a_describe_is_the_clients", RealOnly(PLAN)),
    (
        "prepared.rs::failed_replay_reports_the_error_and_recovers",
        RealOnly("a table dropped and made again from outside between a Parse and its replay"),
    ),
    (
        "prepared.rs::eviction_with_a_bound_of_one",
        Ported(&["eviction_with_a_bound_of_one"]),
    ),
    ("prepared.rs::tokio_postgres_20_clients", RealOnly(DRIVER)),
    ("prepared.rs::tokio_postgres_20_clients_round_robin", RealOnly(DRIVER)),
    (
        "prepared.rs::pgbench_prepared_20_clients",
        RealOnly("pgbench -M prepared and its TPC-B tables"),
    ),
    (
        "prepared.rs::pgbench_prepared_tpcb_16_clients_pool_of_2",
        RealOnly("pgbench -M prepared and its TPC-B tables"),
    ),
    (
        "core.rs::simple_and_extended_queries",
        Partly(&["simple_and_extended_queries"], "generate_series, NULL and binary values through tokio-postgres"),
    ),
    (
        "core.rs::extended_queries_in_session_mode",
        Ported(&["named_statement_at_top_level_in_session_mode"]),
    ),
    (
        "core.rs::pipelined_queries",
        Ported(&["fifty_extended_queries_pipelined"]),
    ),
    (
        "core.rs::raw_pipeline_and_flush",
        Ported(&["three_batches_one_failing_then_flush"]),
    ),
    (
        "core.rs::copy_in_and_out",
        Partly(&["copy_in_and_out_in_transactions"], "CSV and multi-column rows"),
    ),
    (
        "core.rs::copy_in_and_out_session_mode",
        Ported(&["copy_in_and_out_at_top_level"]),
    ),
    (
        "core.rs::notices_and_notifications",
        Partly(&[
            "notice_and_own_notification_in_session_mode",
            "notices_in_every_mode",
        ], "a notification from another session (the oracle runs each client alone)"),
    ),
    (
        "core.rs::function_call",
        RealOnly("FunctionCall ('F'), which neither programs nor the model speak"),
    ),
    ("core.rs::psql_through_the_pooler", RealOnly("the psql binary")),
    ("core.rs::pgbench_through_the_pooler", RealOnly("the pgbench binary")),
    (
        "core.rs::session_mode_keeps_session_state",
        Ported(&["session_state_kept_then_reset"]),
    ),
    (
        "core.rs::transaction_mode_200_clients_pool_of_5",
        Partly(&["many_clients_over_few_servers"], "scaled to 6 clients; pg_stat_activity's backend count"),
    ),
    (
        "core.rs::statement_mode_refuses_transactions",
        RealOnly("the pooler's own 0A000 refusal: directly BEGIN succeeds, so the oracle differs by design"),
    ),
    (
        "core.rs::parameter_sync_timezone",
        RealOnly("per-client startup options (TimeZone); the harness starts every client with the defaults"),
    ),
    ("core.rs::cancel_pg_sleep", RealOnly("a CancelRequest on another connection and pg_sleep in wall-clock time")),
    ("core.rs::cleartext_password_is_not_sent_without_tls", RealOnly("authentication and TLS")),
    ("core.rs::server_login_methods", RealOnly("server authentication methods (md5, SCRAM, ...)")),
    (
        "core.rs::client_disconnect_mid_transaction_does_not_leak",
        Partly(&["client_leaves_mid_transaction"], "a socket closed without Terminate, or mid-query"),
    ),
    (
        "core.rs::server_dies_under_client",
        Partly(&["server_fatal_reaches_its_client_only"], "a backend killed from outside, idle or mid-query (here it ends itself)"),
    ),
    (
        "core.rs::idle_server_killed_is_replaced",
        RealOnly("a server killed from outside while idle in the pool"),
    ),
    ("core.rs::max_client_connections", RealOnly("the listener's connection limit at login")),
    ("core.rs::query_wait_timeout", RealOnly("query_wait_timeout in wall-clock time")),
    ("core.rs::max_waiting_clients", RealOnly("the pool's admission limit (the harness's waiters are unbounded)")),
    ("core.rs::protocol_version_negotiation", RealOnly(STARTUP)),
    ("core.rs::ssl_and_gss_requests_get_n", RealOnly(STARTUP)),
    ("core.rs::startup_without_user_is_refused", RealOnly(STARTUP)),
    ("core.rs::event_lines_in_order", RealOnly("the [POOL] event lines on stdout")),
    ("core.rs::startup_settings_do_not_leak_to_other_clients", RealOnly(STARTUP)),
    ("core.rs::invalid_startup_setting_is_an_error", RealOnly(STARTUP)),
    ("core.rs::client_encoding_is_per_client", RealOnly("client_encoding conversion by a real server")),
    (
        "core.rs::raw_copy_in_transaction_mode",
        Ported(&["copy_in_done_fail_and_out_at_top_level"]),
    ),
    ("core.rs::large_values", Partly(&["large_parameter_and_large_row"], "scaled: 300 kB and 1 MB, not 10 MB and 20 MB")),
    (
        "core.rs::large_pipeline_does_not_deadlock",
        Partly(&["large_pipeline_both_ways"], "scaled: 300 queries, not 20,000 over real sockets"),
    ),
    (
        "core.rs::postgres_restart_is_survived_by_idle_clients",
        RealOnly("a PostgreSQL restart"),
    ),
    ("core.rs::pools_per_database_and_user", RealOnly(STARTUP)),
    (
        "core.rs::query_pipelined_with_startup",
        Ported(&["queries_pipelined_with_startup"]),
    ),
    (
        "core.rs::statement_mode_refuses_pipelined_transaction",
        RealOnly("the pooler's own 0A000 refusal: directly BEGIN succeeds, so the oracle differs by design"),
    ),
    (
        "core.rs::large_result_to_a_client_that_reads_late",
        Ported(&["large_result_read_in_pieces"]),
    ),
    (
        "core.rs::warm_sessions_are_bounded_and_given_back",
        RealOnly("the admin /status endpoint and the process's memory"),
    ),
];

/// The test functions of a test file: every `fn` after a `#[test]` or `#[tokio::test...]`.
pub fn test_fns(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut armed = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            armed = true;
            continue;
        }
        if !armed {
            continue;
        }
        let rest = line.strip_prefix("async ").unwrap_or(line);
        if let Some(rest) = rest.strip_prefix("fn ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
            armed = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: [(&str, &str); 2] = [
        ("prepared.rs", include_str!("../../../tests/it/prepared.rs")),
        ("core.rs", include_str!("../../../tests/it/core.rs")),
    ];

    #[test]
    fn every_test_is_ported_or_says_why_not() {
        let tests: Vec<String> = FILES
            .iter()
            .flat_map(|(file, text)| {
                test_fns(text)
                    .into_iter()
                    .map(move |f| format!("{file}::{f}"))
            })
            .collect();
        let listed: Vec<&str> = COVERAGE.iter().map(|(t, _)| *t).collect();
        let missing: Vec<&String> = tests
            .iter()
            .filter(|t| !listed.contains(&t.as_str()))
            .collect();
        assert!(missing.is_empty(), "tests not in COVERAGE: {missing:?}");
        let stale: Vec<&&str> = listed
            .iter()
            .filter(|t| !tests.iter().any(|x| x == *t))
            .collect();
        assert!(stale.is_empty(), "COVERAGE names no such test: {stale:?}");
        assert_eq!(listed.len(), tests.len(), "a test listed twice");

        let ported = COVERAGE
            .iter()
            .filter(|(_, c)| !matches!(c, RealOnly(_)))
            .count();
        let share = ported as f64 / tests.len() as f64;
        eprintln!(
            "{ported} of {} tests ported ({:.1} %)",
            tests.len(),
            share * 100.0
        );
        assert!(share >= 0.60, "only {ported} of {} ported", tests.len());
    }

    #[test]
    fn ported_entries_and_scenarios_agree() {
        for (test, cover) in COVERAGE {
            let (Ported(names) | Partly(names, _)) = cover else {
                continue;
            };
            for name in *names {
                let s = crate::sim::scenarios::all().find(|s| s.name == *name);
                let s = s.unwrap_or_else(|| panic!("{test}: no scenario {name}"));
                assert_eq!(s.origin, *test, "scenario {name}'s origin");
            }
        }
        for s in crate::sim::scenarios::all() {
            let listed = COVERAGE.iter().any(|(t, c)| {
                *t == s.origin && matches!(c, Ported(n) | Partly(n, _) if n.contains(&s.name))
            });
            assert!(
                listed,
                "scenario {} is not listed under {}",
                s.name, s.origin
            );
        }
    }

    #[test]
    fn test_functions_are_found() {
        let text = "#[tokio::test]\nasync fn a() {}\nfn helper() {}\n#[test]\nfn b() {}\n\
                    #[tokio::test(flavor = \"multi_thread\")]\nasync fn c() {}\n";
        assert_eq!(test_fns(text), ["a", "b", "c"]);
    }
}

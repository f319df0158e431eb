//! The generator keeps to its rules and is a function of its seed; programs print and parse
//! back; the shrinker keeps programs legal and failing.

use bytes::BytesMut;

use super::*;

const SETUPS: [Rules; 5] = [
    Rules::session(3),
    Rules::transaction(false, 3),
    Rules::transaction(true, 3),
    Rules::statement(false, 2),
    Rules::statement(true, 3),
];

#[test]
fn generated_programs_keep_to_their_rules() {
    for rules in SETUPS {
        for seed in 0..300 {
            let p = generate(seed, &rules);
            if let Err(e) = rules.check(&p) {
                panic!("seed {seed} under {rules:?}: {e}\n{p}");
            }
            assert!(!p.clients.is_empty() && p.clients.len() <= rules.clients);
        }
    }
}

#[test]
fn a_seed_makes_one_program() {
    let rules = Rules::session(3);
    assert_eq!(generate(7, &rules), generate(7, &rules));
    assert_ne!(generate(7, &rules), generate(8, &rules));
}

#[test]
fn programs_print_and_parse_back() {
    let p = generate(11, &Rules::session(3));
    let text = p.to_string();
    let back: Program = text.parse().expect("a printed program parses");
    assert_eq!(back, p);
}

#[test]
fn the_differential_tests_cases_parse() {
    let line = r#"{"clients":[{"writes":[{"msgs":[{"Parse":["b","select $1::text"]},"Flush"],"end":"Flush"},{"msgs":[{"Query":"select 1"},{"Bind":["","b",[{"repeat":"z","times":200000}]]},{"Execute":["",0]}],"end":"Fence"},{"msgs":["Sync",{"Query":"rollback"}],"end":"Fence"}]}]}"#;
    let p: Program = line.parse().expect("the differential test's format");
    assert_eq!(Rules::transaction(true, 3).check(&p), Ok(()));
    assert!(Rules::transaction(false, 3).check(&p).is_err());
    let mut b = BytesMut::new();
    p.clients[0].writes[1].msgs[1].encode(&mut b);
    assert_eq!(b.len(), 1 + 4 + 1 + 2 + 2 + 2 + 4 + 200_000 + 2);
}

#[test]
fn illegal_programs_are_refused() {
    let rules = Rules::statement(false, 2);
    let program = |msgs: Vec<Msg>| Program {
        clients: vec![ClientProgram {
            writes: vec![
                Write {
                    msgs,
                    end: End::Fence,
                },
                Write {
                    msgs: vec![],
                    end: End::Fence,
                },
            ],
        }],
    };
    assert_eq!(
        rules.check(&program(vec![Msg::Query("select 1".into())])),
        Ok(())
    );
    for bad in [
        vec![Msg::Query("begin".into())],
        vec![Msg::Parse("a".into(), "select 1".into())],
        vec![Msg::Bind(String::new(), String::new(), vec![])],
        vec![Msg::Query("select 42".into())],
        vec![Msg::Query("insert into diff_t1 values (7)".into())],
        vec![Msg::Query("copy diff_t0 from stdin".into())],
        vec![Msg::CopyDone],
        vec![Msg::Query("set application_name = 'a'".into())],
    ] {
        assert!(rules.check(&program(bad.clone())).is_err(), "{bad:?}");
    }
}

#[test]
fn shrinking_keeps_what_fails_and_nothing_else() {
    let rules = Rules::session(3);
    let fails = |p: &Program| {
        p.clients.iter().any(|c| {
            c.writes
                .iter()
                .flat_map(|w| &w.msgs)
                .any(|m| matches!(m, Msg::Query(q) if q.contains("1/0")))
        })
    };
    let mut shrunk_some = 0;
    for seed in 0..200 {
        let p = generate(seed, &rules);
        if !fails(&p) {
            continue;
        }
        let small = shrink(&p, &rules, fails);
        assert_eq!(rules.check(&small), Ok(()));
        assert!(fails(&small));
        assert_eq!(small.clients.len(), 1, "{small}");
        let writes = &small.clients[0].writes;
        assert_eq!(writes.len(), 2, "{small}");
        assert_eq!(writes[0].msgs.len(), 1, "{small}");
        shrunk_some += 1;
    }
    assert!(shrunk_some > 10);
}

#[test]
fn shrinking_renumbers_the_clients_it_keeps() {
    let rules = Rules::session(3);
    let own_insert = |c: usize, client: &ClientProgram| {
        let q = format!("insert into diff_t{c} values (7)");
        client
            .writes
            .iter()
            .flat_map(|w| &w.msgs)
            .any(|m| *m == Msg::Query(q.clone()))
    };
    let fails = |p: &Program| {
        p.clients
            .iter()
            .enumerate()
            .any(|(c, cl)| own_insert(c, cl))
    };
    let p = (0..2000)
        .map(|s| generate(s, &rules))
        .find(|p| {
            p.clients.len() == 3
                && own_insert(2, &p.clients[2])
                && !own_insert(0, &p.clients[0])
                && !own_insert(1, &p.clients[1])
        })
        .expect("a program where only the third client inserts");
    let small = shrink(&p, &rules, fails);
    assert_eq!(rules.check(&small), Ok(()));
    assert_eq!(small.clients.len(), 1, "{small}");
    assert_eq!(
        small.clients[0].writes[0].msgs,
        vec![Msg::Query("insert into diff_t0 values (7)".into())]
    );
}

//! Reading the pooler's `/metrics`: a Prometheus text-format parser and polling helpers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use super::Pooler;

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses Prometheus text format sample lines (`name{k="v",...} value [timestamp]`).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| parse_sample(l).unwrap_or_else(|| panic!("unparsable metrics line `{l}`")))
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.trim_start_matches([' ', ',']);
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = r.find('=')?;
            let key = r[..eq].trim().to_owned();
            let quoted = r[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let close = loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => {
                        let (_, escaped) = chars.next()?;
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                    '"' => break i,
                    _ => value.push(c),
                }
            };
            labels.insert(key, value);
            r = &quoted[close + 1..];
        }
    }
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The sum of the samples named `name` whose labels include `labels`; None if there is none.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = parse_metrics(text)
        .into_iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .collect();
    if matching.is_empty() {
        None
    } else {
        Some(matching.iter().sum())
    }
}

/// Like [`metric`], panicking (with the scrape) when the sample is missing.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(text, name, labels)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?} in /metrics:\n{text}"))
}

/// Like [`metric`], 0 when the sample is missing (a counter not yet touched).
pub fn metric_or_zero(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(text, name, labels).unwrap_or(0.0)
}

/// `droidpool_servers_closed_total{reason}` of `p` now.
pub fn servers_closed(p: &Pooler, reason: &str) -> f64 {
    metric_or_zero(
        &scrape(p),
        "droidpool_servers_closed_total",
        &[("reason", reason)],
    )
}

/// GET /metrics, asserting 200.
pub fn scrape(p: &Pooler) -> String {
    let (code, body) = block_in_place(|| p.admin_get("/metrics"));
    assert_eq!(code, 200, "GET /metrics: {body}");
    body
}

/// Polls /metrics until `pred` holds (or panics after `within`).
pub async fn wait_metrics(p: &Pooler, within: Duration, what: &str, pred: impl Fn(&str) -> bool) {
    let until = Instant::now() + within;
    loop {
        let text = scrape(p);
        if pred(&text) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{what} not seen within {within:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

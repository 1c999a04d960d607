//! Tests of the statistics (`stats.rs`): the top partitions, and every field summed over the
//! nodes and printed in the report, the shared-operation counts among them.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn the_top_partitions_keep_the_most_live_bytes_in_order() {
    let mut stats = Stats::empty();
    let mut state = 12345u64;
    let mut all = Vec::new();
    for partition in 0..200 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let live = (state % 1000) as usize;
        all.push(live);
        stats.offer_partition(PartitionStats {
            partition,
            live,
            ..PartitionStats::default()
        });
    }
    all.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<usize> = stats.top_partitions().iter().map(|p| p.live).collect();
    assert_eq!(top, all[..TOP_PARTITIONS].to_vec());
    assert_eq!(reclaim_percent(3, 1), 75);
    assert_eq!(tenths_per_thousand(123, 10_000), Some(123));
    assert_eq!(tenths_per_thousand(1, 3), Some(3333));
    assert_eq!(tenths_per_thousand(5, 0), None);
    assert_eq!(reclaim_percent(0, 0), 0);
}

/// The report `stats` writes, as text, read back through a temporary file.
fn report(stats: &Stats) -> String {
    use std::os::fd::AsRawFd;
    static REPORTS: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "nodalloc-report-{}-{}",
        std::process::id(),
        REPORTS.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&path).unwrap();
    stats.write_to(file.as_raw_fd());
    drop(file);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    text
}

/// `value` as the report writes it.
fn shown(shown: Shown, value: u64, allocs: u64) -> String {
    let mut w = Writer::new();
    write_value(&mut w, shown, value, allocs);
    String::from_utf8(w.as_bytes().to_vec()).unwrap()
}

/// Gives the `field`-th row (from 1, in table order) of `node_summed_fields` the value
/// `field` on node 0, `100 field` on node 1 and `10 000 field` on node 2, which lies past
/// `node_count` and must not count; then checks each total and the report's lines.
macro_rules! check_summed_fields {
    ([$(
        $(#[$doc:meta])*
        $name:ident: $ty:ty, $total:literal, $shown:ident $label:literal [$($line:ident),*];
    )*]) => {{
        let mut stats = Stats::empty();
        stats.node_count = 2;
        let mut field: u64 = 0;
        $(
            field += 1;
            stats.nodes[0].$name = field as $ty;
            stats.nodes[1].$name = (100 * field) as $ty;
            stats.nodes[2].$name = (10_000 * field) as $ty;
        )*
        stats.sum_nodes();
        stats.sum_nodes();
        let mut field: u64 = 0;
        $(
            field += 1;
            assert_eq!(stats.$name as u64, 101 * field, stringify!($name));
        )*
        let rows = field as usize;
        assert_eq!(rows, SUMMED_FIELDS.len());
        for (index, (total, (node_0, node_1))) in stats
            .summed_values()
            .iter()
            .zip(stats.nodes[0].summed_values().iter().zip(stats.nodes[1].summed_values()))
            .enumerate()
        {
            let field = index as u64 + 1;
            assert_eq!((*total, *node_0, node_1), (101 * field, field, 100 * field));
        }

        // The report: the totals' two lines, then each node's two.
        let text = report(&stats);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("  ") && lines[1].contains(", peak committed "));
        assert!(lines[2].starts_with("  allocs 0, frees 0"));
        assert!(lines[3].starts_with("  node 0: ") && lines[5].starts_with("  node 1: "));
        // The text after the node's summed fields qualifies huge pages: they stay last.
        let huge_pages = shown(Shown::Bytes, stats.nodes[0].huge_pages as u64, 0);
        let huge_pages = format!("huge pages {huge_pages} (0% of 0 B");
        assert!(lines[3].contains(&huge_pages), "{}", lines[3]);
        let mut field: u64 = 0;
        $(
            field += 1;
            let printed_on = [$(ReportLine::$line),*];
            for (line, at, value) in [
                (ReportLine::TotalBytes, 1, 101 * field),
                (ReportLine::TotalObjects, 2, 101 * field),
                (ReportLine::Node, 3, field),
                (ReportLine::Node, 5, 100 * field),
            ] {
                let expected = format!("{} {}", $label, shown(Shown::$shown, value, 0));
                assert_eq!(
                    lines[at].contains(&expected),
                    printed_on.contains(&line),
                    "{} on {line:?}: {expected:?} in {:?}",
                    stringify!($name),
                    lines[at],
                );
            }
        )*
    }};
}

#[test]
fn every_summed_field_is_the_sum_of_the_nodes_and_printed_on_its_lines() {
    node_summed_fields! { check_summed_fields! {} }
}

/// Gives the `field`-th row (from 1) of `shared_op_fields` the count `field` on node 0 and
/// `100 field` on node 1; then checks the sums and each node's line of rates.
macro_rules! check_shared_op_fields {
    ([$($(#[$doc:meta])* $name:ident: $shown:ident $before:literal;)*]) => {{
        let mut stats = Stats::empty();
        stats.node_count = 2;
        let mut field: u64 = 0;
        $(
            field += 1;
            stats.nodes[0].shared.$name = field;
            stats.nodes[1].shared.$name = 100 * field;
        )*
        stats.nodes[0].allocs = 1000;
        stats.nodes[1].allocs = 1000;
        stats.sum_nodes();
        let text = report(&stats);
        let lines: Vec<&str> = text.lines().collect();
        let (mut expected_0, mut expected_1) = (String::new(), String::new());
        let mut field: u64 = 0;
        $(
            field += 1;
            assert_eq!(stats.shared.$name, 101 * field, stringify!($name));
            expected_0 += $before;
            expected_0 += &shown(Shown::$shown, field, 1000);
            expected_1 += $before;
            expected_1 += &shown(Shown::$shown, 100 * field, 1000);
        )*
        let header = "    shared operations per 1000 allocations: ";
        assert_eq!(lines[4], format!("{header}{expected_0}"));
        assert_eq!(lines[6], format!("{header}{expected_1}"));
    }};
}

#[test]
fn every_shared_operation_count_is_summed_and_printed_as_a_rate_or_count() {
    shared_op_fields! { check_shared_op_fields! {} }
    // The rows' texts make the line tools and tests read (`waves.c`: "objects from bags").
    let mut stats = Stats::empty();
    stats.node_count = 1;
    stats.nodes[0].allocs = 1000;
    stats.nodes[0].shared.contended_locks = 2;
    stats.nodes[0].shared.heaps_retired = 3;
    let text = report(&stats);
    let line = text.lines().nth(4).unwrap();
    let start = "    shared operations per 1000 allocations: class locks 0.0 (contended 2.0), ";
    assert!(line.starts_with(start), "{line}");
    assert!(
        line.contains(", objects from bags 0.0 (reused 0.0), objects to bags 0.0, "),
        "{line}"
    );
    assert!(line.ends_with(", heaps attached 0, retired 3"), "{line}");
}

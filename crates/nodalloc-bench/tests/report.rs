//! The report generator on made-up numbers: ranking, noise, targets, the
//! Markdown, the CSV and the files written.

use nodalloc_bench::report::{geomean, median, Better, Record, Report, Series};

fn rec(case: &str, alloc: &str, samples: &[f64], rss: Option<u64>) -> Record {
    let mut r = Record::new("rust", "g", case, alloc, Better::Lower);
    r.samples = samples.to_vec();
    r.ops = 1000;
    r.peak_rss_kib = rss;
    r
}

fn sample_report() -> Report {
    let mut rep = Report {
        title: "test report".into(),
        command: "nodalloc-bench --test".into(),
        machine: vec!["machine: test".into()],
        ..Report::default()
    };
    // Case a: nodalloc clearly best, glibc overlapping mimalloc.
    rep.records
        .push(rec("a", "nodalloc", &[9.0, 10.0, 11.0], Some(1000)));
    rep.records
        .push(rec("a", "mimalloc", &[19.0, 20.0, 21.0], Some(2000)));
    rep.records
        .push(rec("a", "glibc", &[21.5, 30.0, 40.0], Some(1500)));
    // Case b: a throughput; nodalloc 2x slower than the best peer.
    for (alloc, v) in [("nodalloc", 50.0), ("mimalloc", 100.0), ("glibc", 80.0)] {
        let mut r = rec("b", alloc, &[v], None);
        r.better = Better::Higher;
        r.unit = "req/s".into();
        rep.records.push(r);
    }
    // nodalloc's own variant is not a peer: its better time must not count against nodalloc.
    rep.records
        .push(rec("a", "nodalloc-secure", &[1.0, 1.0, 1.0], None));
    // Case c: glibc failed.
    rep.records.push(rec("c", "nodalloc", &[5.0], Some(100)));
    rep.records.push(rec("c", "mimalloc", &[5.0], Some(100)));
    let mut failed = rec("c", "glibc", &[], None);
    failed.failure = Some("exit status: 1".into());
    rep.records.push(failed);
    rep.series.push(Series {
        plot: "latency_cdf".into(),
        allocator: "nodalloc".into(),
        points: vec![(10.0, 0.5), (20.0, 0.9), (100.0, 1.0)],
    });
    rep
}

#[test]
fn statistics() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(median(&[]), None);
    assert!((geomean(&[1.0, 4.0]).unwrap() - 2.0).abs() < 1e-12);
    assert_eq!(geomean(&[1.0, 0.0]), None);
}

#[test]
fn cases_are_ranked_with_ratios_to_the_best() {
    let rep = sample_report();
    let cases = rep.summarize();
    assert_eq!(
        cases.iter().map(|c| c.case.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"],
        "cases keep their order"
    );
    let a = &cases[0];
    assert_eq!(a.rows[0].allocator, "nodalloc-secure");
    assert_eq!(a.rows[1].allocator, "nodalloc");
    assert_eq!(a.rows[1].rank, Some(2));
    let m = a.row("mimalloc").unwrap();
    assert_eq!(m.rank, Some(3));
    assert!((m.ratio.unwrap() - 20.0).abs() < 1e-12);
    assert!(!m.within_noise, "19-21 does not overlap 9-11");
    let g = a.row("glibc").unwrap();
    assert!((g.ratio.unwrap() - 30.0).abs() < 1e-12);
    assert!(!g.within_noise);
    assert!((g.rss_ratio.unwrap() - 1.5).abs() < 1e-12);

    // Throughput: the highest wins, ratios are inverted.
    let b = &cases[1];
    assert_eq!(b.rows[0].allocator, "mimalloc");
    assert!((b.row("nodalloc").unwrap().ratio.unwrap() - 2.0).abs() < 1e-12);
    assert_eq!(b.row("nodalloc").unwrap().rank, Some(3));

    // A failure is listed last, unranked; equal costs are within the noise.
    let c = &cases[2];
    assert_eq!(c.rows.last().unwrap().allocator, "glibc");
    assert_eq!(c.rows.last().unwrap().rank, None);
    assert!(c.rows[1].within_noise);
}

#[test]
fn targets_are_judged_from_the_records() {
    let rep = sample_report();
    let t = rep.targets();
    // Time vs mimalloc: a 0.5, b 2.0, c 1.0 -> geomean 1.0.
    assert!(
        t[0].measured.starts_with("1.000× over 3 cases"),
        "{:?}",
        t[0]
    );
    assert_eq!(t[0].met, Some(false));
    // RSS vs mimalloc: a 0.5, c 1.0 -> 0.707.
    assert!(t[1].measured.starts_with("0.707×"), "{:?}", t[1]);
    assert_eq!(t[1].met, Some(true));
    // b: mimalloc serves 100 req/s, nodalloc 50, so nodalloc costs 2x the best peer.
    assert_eq!(t[2].met, Some(false));
    assert!(t[2].measured.contains("b 2.00× mimalloc"), "{:?}", t[2]);
}

#[test]
fn markdown_and_csv_carry_every_run() {
    let rep = sample_report();
    let md = rep.markdown(&[("Latency".into(), "latency_cdf.png".into())]);
    for needle in [
        "# test report",
        "Command: `nodalloc-bench --test`",
        "## Targets",
        "## Summary",
        "### a (rust suite",
        "![Latency](latency_cdf.png)",
        "failed: exit status: 1",
        "| nodalloc-secure |",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    assert!(
        md.lines()
            .any(|l| l.starts_with("| nodalloc ") && l.contains("|    3 |") && l.contains("10.0")),
        "no row for nodalloc's 3 runs with median 10.0:\n{md}"
    );
    let csv = rep.csv();
    let lines: Vec<&str> = csv.lines().collect();
    // Header + 3+3+3+3 runs of a, 3 of b, 2 of c + 1 line for the failure.
    assert_eq!(lines.len(), 1 + 12 + 3 + 2 + 1, "{csv}");
    assert!(lines[0].starts_with("suite,group,case,allocator"));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("rust,g,a,glibc,ns/op,lower,2,40,")));
}

#[test]
fn write_produces_the_report_the_csv_and_the_plots() {
    let dir = std::env::temp_dir().join(format!("nodalloc-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rep = sample_report();
    // A size sweep: two points per allocator make a line.
    for (alloc, base) in [("nodalloc", 10.0), ("glibc", 20.0)] {
        for size in [8.0, 64.0, 4096.0] {
            let mut r = Record::new(
                "rust",
                "single_size",
                &format!("s/{size}"),
                alloc,
                Better::Lower,
            );
            r.samples = vec![base + size / 100.0];
            r.x = Some(size);
            rep.records.push(r);
        }
    }
    let written = rep.write(&dir).expect("report written");
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names[0], "report.md");
    assert!(names.contains(&"results.csv".to_string()));
    for plot in ["size_sweep", "latency_cdf"] {
        let file = names
            .iter()
            .find(|n| n.starts_with(plot))
            .unwrap_or_else(|| panic!("no {plot} plot in {names:?}"));
        let bytes = std::fs::read(dir.join(file)).unwrap();
        assert!(bytes.len() > 1000, "{file} is only {} bytes", bytes.len());
        if file.ends_with(".png") {
            assert_eq!(&bytes[1..4], b"PNG");
        } else {
            assert!(String::from_utf8_lossy(&bytes).contains("<svg"));
        }
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Plots"));
    let _ = std::fs::remove_dir_all(&dir);
}

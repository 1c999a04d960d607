//! Tests of the options (`options.rs`): the parsers, each variable documented with a default
//! that parses to it, bad values refused, and values reaching their fields.

use super::*;

#[test]
fn sizes_parse_with_binary_units() {
    assert_eq!(parse_size(b"4096"), Some(4096));
    assert_eq!(parse_size(b"64K"), Some(64 << 10));
    assert_eq!(parse_size(b"8M"), Some(8 << 20));
    assert_eq!(parse_size(b"8MiB"), Some(8 << 20));
    assert_eq!(parse_size(b"1g"), Some(1 << 30));
    assert_eq!(parse_size(b"2T"), Some(2 << 40));
    assert_eq!(parse_size(b"12x"), None);
    assert_eq!(parse_size(b""), None);
    assert_eq!(parse_size(b"99999999999T"), None);
}

#[test]
fn the_maintenance_thread_option_takes_release_full_or_off() {
    assert_eq!(Options::default().background, Background::Release);
    assert_eq!(parse_background(b"release"), Some(Background::Release));
    assert_eq!(parse_background(b" release\n"), Some(Background::Release));
    for full in [&b"1"[..], b"yes", b"true"] {
        assert_eq!(parse_background(full), Some(Background::Full));
    }
    for off in [&b"0"[..], b"no", b"false"] {
        assert_eq!(parse_background(off), Some(Background::Off));
    }
    for bad in [&b""[..], b"2", b"Release", b"full"] {
        assert_eq!(parse_background(bad), None, "{bad:?}");
    }
}

#[test]
fn bind_maps_parse_with_comments() {
    let mut map = [0u16; MAX_BIND_MAP];
    let n = parse_bind_map(b"# threads to nodes\n0 1, 1\n3 # last\n", &mut map).unwrap();
    assert_eq!(&map[..n], &[0, 1, 1, 3]);
    assert!(parse_bind_map(b"0 x 1", &mut map).is_none());
}

#[test]
fn every_option_is_documented_with_a_default() {
    for option in OPTIONS {
        assert!(option.name.starts_with("NODALLOC_"));
        assert!(!option.default.is_empty() && option.meaning.len() > 20);
    }
}

#[test]
fn each_documented_default_parses_to_the_default_options() {
    for option in OPTIONS {
        let mut options = Options::default();
        (option.apply)(&mut options, option.default.as_bytes())
            .unwrap_or_else(|expected| panic!("{}'s default: expected {expected}", option.name));
        assert_eq!(
            options,
            Options::default(),
            "{}={}",
            option.name,
            option.default
        );
    }
}

#[test]
fn every_option_refuses_a_bad_value_and_keeps_the_default() {
    for option in OPTIONS {
        for bad in [&b"bogus"[..], b"-1", b"99999999999999999999999"] {
            let mut options = Options::default();
            let refused = (option.apply)(&mut options, bad);
            assert!(refused.is_err(), "{}={:?} was taken", option.name, bad);
            assert_eq!(options, Options::default(), "{}={:?}", option.name, bad);
        }
    }
}

#[test]
fn values_reach_their_fields() {
    let set = |name: &str, value: &[u8]| {
        let option = OPTIONS.iter().find(|o| o.name == name).unwrap();
        let mut options = Options::default();
        (option.apply)(&mut options, value).unwrap();
        options
    };
    assert!(set("NODALLOC_POLICY", b"bind").strict_binding);
    assert_eq!(set("NODALLOC_SIMULATE_NODES", b" 4\n").simulate_nodes, 4);
    assert_eq!(set("NODALLOC_REGION_SIZE", b"100G").region_bytes, 64 << 30);
    assert_eq!(
        set("NODALLOC_COMMIT", b"demand").commit_on_demand,
        Some(true)
    );
    assert_eq!(set("NODALLOC_THP", b"never").thp, ThpChoice::Off);
    assert_eq!(
        set("NODALLOC_DECOMMIT_DELAY", b"250").decommit_delay_ns,
        250_000_000
    );
    assert_eq!(set("NODALLOC_RETAIN", b"1G").retain_bytes, 1 << 30);
    assert_eq!(set("NODALLOC_SPARES", b"16M").spare_bytes, 16 << 20);
    assert_eq!(set("NODALLOC_SPARES", b"0").spare_bytes, 0);
    assert_eq!(set("NODALLOC_LIMIT", b"512M").limit_bytes, 512 << 20);
    assert!(set("NODALLOC_STATS", b"yes").stats_at_exit);
    assert!(set("NODALLOC_SECURE", b" true ").secure);
    assert!(!set("NODALLOC_SECURE", b"0").secure);
    assert_eq!(set("NODALLOC_BACKGROUND", b"0").background, Background::Off);
    assert_eq!(set("NODALLOC_RING_SHARDS", b"3").ring_shards, 3);
    assert_eq!(set("NODALLOC_CALLSITE", b"64").callsite_partitions, 64);
    assert_eq!(set("NODALLOC_CALLSITE_DEPTH", b"3").callsite_depth, 3);
    assert_eq!(set("NODALLOC_BIND", b"saturate").bind, BindPolicy::Saturate);
    assert_eq!(
        set("NODALLOC_TIERS", b"near:0;far:1-2").tiers_far,
        Some(0b110)
    );
}

//! The README documents every option the code reads, with the code's default.

#[test]
fn readme_lists_every_option_with_its_default() {
    let readme = include_str!("../../../README.md");
    for option in nodalloc::options() {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{}`", option.name)))
            .unwrap_or_else(|| panic!("README has no row for {}", option.name));
        assert!(
            row.contains(&format!("`{}`", option.default)),
            "README row for {} lacks the default {}",
            option.name,
            option.default
        );
    }
}

#[test]
fn every_option_the_readme_lists_is_one_the_code_reads() {
    let readme = include_str!("../../../README.md");
    let names: Vec<&str> = nodalloc::options().iter().map(|o| o.name).collect();
    let mut rows = 0;
    for line in readme.lines() {
        let Some(rest) = line.strip_prefix("| `NODALLOC_") else {
            continue;
        };
        let name = format!("NODALLOC_{}", rest.split('`').next().unwrap());
        assert!(
            names.contains(&name.as_str()),
            "README lists {name}, which the code does not read"
        );
        rows += 1;
    }
    assert_eq!(
        rows,
        names.len(),
        "README's option table has a row per option"
    );
}

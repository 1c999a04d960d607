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

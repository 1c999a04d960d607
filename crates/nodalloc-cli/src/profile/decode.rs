//! Reading a pprof profile (`profile.proto`, gzip or plain) into samples whose stacks are
//! function names: names the profile carries (pprof's own and Go's profiles are symbolized),
//! or names looked up in the mapped files' debug information and symbol tables (nodalloc's
//! profiles carry addresses only, as jemalloc's and tcmalloc's do).

use super::symbols::Symbolizer;
use flate2::read::GzDecoder;
use prost::Message;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// `profile.proto`'s messages, the fields this reader uses (the tags are the format's).
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
    }
}

/// A mapped file, as the profile names it.
pub struct Mapping {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
    pub file: String,
    /// The GNU build ID, as the profile gives it (hex digits from nodalloc).
    pub build_id: String,
}

/// One sample: its stack (leaf first), one value per sample type, its labels.
pub struct Sample {
    pub stack: Vec<String>,
    pub values: Vec<i64>,
    pub labels: Vec<(String, String)>,
}

/// A profile ready to report on.
pub struct Profile {
    /// Sample types and their units ("inuse_space", "bytes").
    pub types: Vec<(String, String)>,
    /// The sample type reported when none is asked for.
    pub default_type: Option<String>,
    /// Mean bytes between samples (0 when the profile does not say).
    pub period: i64,
    pub samples: Vec<Sample>,
}

impl Profile {
    /// The index of the values of `name`, or of the default sample type when `name` is None.
    pub fn type_index(&self, name: Option<&str>) -> Result<usize, String> {
        let wanted = name.or(self.default_type.as_deref());
        match wanted {
            Some(wanted) => self
                .types
                .iter()
                .position(|(kind, _)| kind == wanted)
                .ok_or_else(|| {
                    let known: Vec<&str> = self.types.iter().map(|(k, _)| k.as_str()).collect();
                    format!(
                        "the profile has no sample type {wanted} (it has {})",
                        known.join(", ")
                    )
                }),
            None if !self.types.is_empty() => Ok(self.types.len() - 1),
            None => Err("the profile has no sample types".to_string()),
        }
    }
}

/// Reads the profile at `path` and names its frames.
pub fn read(path: &Path) -> Result<Profile, String> {
    let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| format!("{}: not a gzip stream: {e}", path.display()))?;
        out
    } else {
        raw
    };
    let profile = pb::Profile::decode(&bytes[..])
        .map_err(|e| format!("{}: not a pprof profile: {e}", path.display()))?;
    Ok(convert(profile))
}

fn convert(profile: pb::Profile) -> Profile {
    let strings = &profile.string_table;
    let text = |index: i64| -> String {
        usize::try_from(index)
            .ok()
            .and_then(|i| strings.get(i))
            .cloned()
            .unwrap_or_default()
    };
    let functions: HashMap<u64, String> = profile
        .function
        .iter()
        .map(|f| (f.id, text(f.name)))
        .collect();
    let mappings: HashMap<u64, Mapping> = profile
        .mapping
        .iter()
        .map(|m| {
            (
                m.id,
                Mapping {
                    start: m.memory_start,
                    limit: m.memory_limit,
                    offset: m.file_offset,
                    file: text(m.filename),
                    build_id: text(m.build_id),
                },
            )
        })
        .collect();
    let mut symbolizer = Symbolizer::default();
    let mut locations: HashMap<u64, Vec<String>> = HashMap::new();
    for location in &profile.location {
        let mut names: Vec<String> = location
            .line
            .iter()
            .filter_map(|line| functions.get(&line.function_id))
            .filter(|name| !name.is_empty())
            .cloned()
            .collect();
        if names.is_empty() {
            let mapping = mappings.get(&location.mapping_id).or_else(|| {
                mappings
                    .values()
                    .find(|m| (m.start..m.limit).contains(&location.address))
            });
            names = symbolizer.names(mapping, location.address);
        }
        locations.insert(location.id, names);
    }
    let samples = profile
        .sample
        .iter()
        .map(|sample| Sample {
            stack: sample
                .location_id
                .iter()
                .flat_map(|id| {
                    locations
                        .get(id)
                        .cloned()
                        .unwrap_or_else(|| vec![format!("location {id}")])
                })
                .collect(),
            values: sample.value.clone(),
            labels: sample
                .label
                .iter()
                .map(|label| {
                    let value = if label.str != 0 {
                        text(label.str)
                    } else {
                        label.num.to_string()
                    };
                    (text(label.key), value)
                })
                .collect(),
        })
        .collect();
    let types: Vec<(String, String)> = profile
        .sample_type
        .iter()
        .map(|t| (text(t.r#type), text(t.unit)))
        .collect();
    Profile {
        default_type: (profile.default_sample_type != 0).then(|| text(profile.default_sample_type)),
        types,
        period: profile.period,
        samples,
    }
}

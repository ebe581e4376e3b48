//! The serde plumbing of the JSON file: tagged objects (`qdisc.kind`,
//! `loss.model`, `dist`) are parsed by hand rather than by serde's internally
//! tagged enums, so that an unknown tag lists the valid ones and an error
//! inside a variant keeps its field path; [`path_error`] turns serde's error
//! into the one-line [`ConfigError`] `main` prints.

use serde_json::Value;

use super::ConfigError;

/// Marks a nested field path inside a custom error message (see `from_json`).
const PATH_MARK: char = '\u{1}';

/// Take the tag field out of a tagged object; error on a missing/unknown tag.
pub(super) fn split_tag<E: serde::de::Error>(v: Value, tag: &str, kinds: &[&str]) -> Result<(String, Value), E> {
    let Value::Object(mut m) = v else {
        return Err(E::custom(format!("must be an object with a {tag:?} field")));
    };
    let expected = kinds.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    match m.remove(tag) {
        Some(Value::String(s)) if kinds.contains(&s.as_str()) => Ok((s, Value::Object(m))),
        Some(Value::String(s)) => {
            Err(E::custom(format!("{PATH_MARK}{tag}{PATH_MARK}unknown {tag} `{s}`, expected one of {expected}")))
        }
        Some(_) => Err(E::custom(format!("{PATH_MARK}{tag}{PATH_MARK}must be a string, one of {expected}"))),
        None => Err(E::custom(format!("missing field `{tag}` (one of {expected})"))),
    }
}

/// Deserialize a variant's fields, keeping the path of a nested error.
pub(super) fn sub<T: serde::de::DeserializeOwned, E: serde::de::Error>(v: Value) -> Result<T, E> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().to_string();
        if path == "." {
            E::custom(msg)
        } else {
            E::custom(format!("{PATH_MARK}{path}{PATH_MARK}{msg}"))
        }
    })
}

/// A serde error of the whole file as a [`ConfigError`] naming its field.
pub(super) fn path_error(e: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
    let mut path = e.path().to_string();
    let inner = e.into_inner();
    let mut msg = inner.to_string();
    if inner.is_data() {
        // serde_json appends " at line L column C": the path says more.
        if let Some(i) = msg.rfind(" at line ") {
            msg.truncate(i);
        }
    }
    // A tagged object (qdisc, loss, dist) reports its nested field path
    // between two PATH_MARKs at the start of the message.
    if let Some(rest) = msg.strip_prefix(PATH_MARK) {
        if let Some((sub, m)) = rest.split_once(PATH_MARK) {
            path = if path == "." { sub.to_string() } else { format!("{path}.{sub}") };
            msg = m.to_string();
        }
    }
    if path == "." {
        path.clear();
    }
    // "missing field `x`" is about x: name it in the path.
    if let Some(rest) = msg.strip_prefix("missing field `") {
        if let Some((name, tail)) = rest.split_once('`') {
            path = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
            msg = format!("required field is missing{tail}");
        }
    }
    ConfigError::new(path, msg)
}

//! What a failed check returns ([`ConfigError`], the field's dotted path and
//! what is wrong) and the range checks several sections share, so that the
//! same rule reads the same in every error message.

use std::fmt;

/// A configuration error: the dotted path of the field and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub field: String,
    pub msg: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, msg: impl Into<String>) -> Self {
        Self { field: field.into(), msg: msg.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}: {}", self.field, self.msg)
        }
    }
}

impl std::error::Error for ConfigError {}

pub(super) fn positive(field: &str, v: f64) -> Result<(), ConfigError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(ConfigError::new(field, format!("must be a positive number, got {v}")));
    }
    Ok(())
}

pub(super) fn non_negative(field: &str, v: f64) -> Result<(), ConfigError> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(ConfigError::new(field, format!("must be >= 0, got {v}")));
    }
    Ok(())
}

pub(super) fn probability(field: &str, v: f64) -> Result<(), ConfigError> {
    if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
        return Err(ConfigError::new(field, format!("must be a probability in [0, 1], got {v}")));
    }
    Ok(())
}

/// Linux's ranges for fq_codel's `flows` and `quantum`.
pub(super) fn flow_queues(at: &str, flows: usize, quantum: usize) -> Result<(), ConfigError> {
    if !(1..=65_536).contains(&flows) {
        return Err(ConfigError::new(format!("{at}.flows"), format!("must be 1..65536 (default 1024), got {flows}")));
    }
    if !(256..=1 << 20).contains(&quantum) {
        return Err(ConfigError::new(
            format!("{at}.quantum"),
            format!("must be 256..1048576 bytes (default 1514, one Ethernet frame), got {quantum}"),
        ));
    }
    Ok(())
}

pub(super) fn packet_limit(field: &str, v: usize) -> Result<(), ConfigError> {
    if v == 0 || v > 10_000_000 {
        return Err(ConfigError::new(field, format!("must be 1..10000000, got {v}")));
    }
    Ok(())
}

//! The reader's error: a public status (`NRT_INVALID` or `NRT_UNSUPPORTED_NEFF_VERSION`, the
//! two neff-format §3 pins) and the precise reason, worded as libnrt logs it where the sources
//! give the text.

use nrt_core::abi::NRT_STATUS;

/// Result alias of the crate.
pub type Result<T, E = NeffError> = core::result::Result<T, E>;

/// Why a NEFF was refused (neff-format §3, §6–§9).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct NeffError {
    status: NRT_STATUS,
    msg: String,
    gate: Option<&'static str>,
}

impl NeffError {
    /// A refusal with `NRT_INVALID` (2): malformed container or metadata.
    pub fn invalid(msg: impl Into<String>) -> Self {
        NeffError {
            status: NRT_STATUS::NRT_INVALID,
            msg: msg.into(),
            gate: None,
        }
    }

    /// A refusal with `NRT_UNSUPPORTED_NEFF_VERSION` (10): version ceiling, feature trapdoor,
    /// packager (neff-format §3 gates 4, 5, 7).
    pub fn unsupported(msg: impl Into<String>) -> Self {
        NeffError {
            status: NRT_STATUS::NRT_UNSUPPORTED_NEFF_VERSION,
            msg: msg.into(),
            gate: None,
        }
    }

    /// The public status this refusal surfaces as.
    pub fn status(&self) -> NRT_STATUS {
        self.status
    }

    /// The reason.
    pub fn message(&self) -> &str {
        &self.msg
    }

    /// The header gate that refused the file (`"size floor"`, `"integrity"`, … neff-format §3),
    /// or `None` when the header passed and the archive or the metadata refused it (the
    /// message then names the member).
    pub fn gate(&self) -> Option<&'static str> {
        self.gate
    }

    /// The same refusal, made by header gate `name`.
    pub(crate) fn at_gate(mut self, name: &'static str) -> Self {
        self.gate = Some(name);
        self
    }

    /// The same refusal with `ctx` in front of the reason (`"sg00/def.json: "`).
    pub(crate) fn context(mut self, ctx: &str) -> Self {
        self.msg = format!("{ctx}: {}", self.msg);
        self
    }

    /// The same refusal with `note` after the reason, in parentheses.
    pub(crate) fn note(mut self, note: &str) -> Self {
        self.msg = format!("{} ({note})", self.msg);
        self
    }
}

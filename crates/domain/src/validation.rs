//! Field-level validation errors: a JSON Pointer to the offending field and a sentence a person
//! can act on. The API renders them as problem+json, the CLI as `field: detail` lines.

use serde::Serialize;

use crate::limits::{MAX_NAME_LEN, MAX_REPLY_TEXT_BYTES};

/// One offending field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FieldError {
    /// RFC 6901 pointer into the request body, e.g. `/detail/message/text`.
    pub pointer: String,
    pub detail: String,
}

/// Every offending field of one input, so a caller can fix them all at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.0))]
pub struct ValidationErrors(pub Vec<FieldError>);

fn render(errors: &[FieldError]) -> String {
    // An error about the whole document is its detail alone ("is not valid JSON: …"), after
    // whatever names the document (a file's path, a request).
    let line = |e: &FieldError| match e.pointer.is_empty() {
        true => e.detail.clone(),
        false => format!("{}: {}", e.pointer, e.detail),
    };
    errors.iter().map(line).collect::<Vec<_>>().join("; ")
}

impl ValidationErrors {
    pub fn push(&mut self, pointer: impl Into<String>, detail: impl Into<String>) {
        self.0.push(FieldError { pointer: pointer.into(), detail: detail.into() });
    }

    pub fn single(pointer: impl Into<String>, detail: impl Into<String>) -> Self {
        let mut e = Self::default();
        e.push(pointer, detail);
        e
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(())` when nothing was pushed.
    pub fn into_result(self) -> Result<(), Self> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

/// A record's name (an agent's, a trigger's, a skill's): not blank, at most [`MAX_NAME_LEN`]
/// characters.
pub(crate) fn check_name(errors: &mut ValidationErrors, pointer: &str, name: &str) {
    let len = name.chars().count();
    if name.trim().is_empty() || len > MAX_NAME_LEN {
        errors.push(pointer, format!("must be 1 to {MAX_NAME_LEN} characters, not blank"));
    }
}

/// A fixed reply a tenant configures (`onLimit`, `onFailure`): not blank, at most
/// [`MAX_REPLY_TEXT_BYTES`], as the reply tool's text.
pub(crate) fn check_reply_text(errors: &mut ValidationErrors, pointer: &str, text: &str) {
    if text.trim().is_empty() || text.len() > MAX_REPLY_TEXT_BYTES {
        errors.push(pointer, format!("must be 1 to {MAX_REPLY_TEXT_BYTES} bytes of text"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_about_the_whole_document_is_its_detail_alone() {
        let mut errors = ValidationErrors::single("", "is not valid JSON: EOF");
        errors.push("/name", "is required");
        assert_eq!(errors.to_string(), "is not valid JSON: EOF; /name: is required");
    }
}

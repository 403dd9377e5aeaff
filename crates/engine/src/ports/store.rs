//! What every store port shares: its error, classified by whether trying again can help, and
//! a page of a listing.

use serde::{Deserialize, Serialize};

/// A store failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: someone else wrote first. Re-read and retry.
    #[error("version conflict: {0}")]
    VersionConflict(String),
    /// The record (e.g. the execution for this source) already exists.
    #[error("already recorded: {0}")]
    Duplicate(String),
    /// A stored record could not be read back (corrupt or from an incompatible version).
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("store unavailable: {message}")]
    Unavailable { message: String, retryable: bool },
}

impl StoreError {
    pub fn retryable(&self) -> bool {
        match self {
            StoreError::VersionConflict(_) => true,
            StoreError::Duplicate(_) | StoreError::Corrupt(_) => false,
            StoreError::Unavailable { retryable, .. } => *retryable,
        }
    }
}

/// A page of results and the cursor of the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// A page of `limit` from `items` read one past it: the extra item only says that another
    /// page follows, whose cursor `cursor` makes from the page's last item.
    pub fn from_overfetch(mut items: Vec<T>, limit: usize, cursor: impl FnOnce(&T) -> String) -> Self {
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if more { items.last().map(cursor) } else { None };
        Self { items, next_cursor }
    }
}
